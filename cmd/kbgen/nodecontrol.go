package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/node"
)

// checkFlags refuses the flags of one kind of install given to the other:
// a GPU flag on a control agent (or the reverse) would be silently
// ignored, and the operator would believe it took effect.
func (c *NodeInstallCmd) checkFlags() error {
	gpuOnly := map[string]bool{"--queue": c.Queue != "", "--plugin": c.Plugin != "", "--verification-key": c.VerificationKey != "",
		"--allow-profiling": c.AllowProfiling, "--shape": len(c.Shape) > 0, "--mig-queue": c.MIGQueue != ""}
	controlOnly := map[string]bool{"--signing-key": c.SigningKey != "", "--vendors": c.Vendors != "", "--spawn": c.Spawn != node.DefaultControlSpawn}
	wrong, kind := gpuOnly, "GPU agents, not --control (the control agent takes queue "+contract.ControlQueue+")"
	if !c.Control {
		wrong, kind = controlOnly, "--control only"
	}
	var given []string
	for flag, set := range wrong {
		if set {
			given = append(given, flag)
		}
	}
	if len(given) > 0 {
		slices.Sort(given)
		return fmt.Errorf("%s is for %s", strings.Join(given, ", "), kind)
	}
	if !c.Control && c.Queue == "" {
		return errors.New("missing flag --queue: the Buildkite queue the agents serve, e.g. --queue nvidia-h100 (or --control for Kernelbot's control agent)")
	}
	return nil
}

// runControl installs Kernelbot's control agent.
func (c *NodeInstallCmd) runControl(g *Globals) error {
	rep, err := node.InstallControl(node.ControlRequest{
		Inputs:  node.ControlInputs{TokenFile: c.TokenFile, EnvToken: g.Getenv(contract.EnvAgentToken), SigningKey: c.SigningKey, Vendors: c.Vendors, Root: c.Root},
		Options: node.ControlOptions{AgentBinary: c.AgentBinary, User: c.User, KbgenPath: c.KbgenPath, Spawn: c.Spawn},
		DryRun:  c.DryRun,
	})
	if rep != nil {
		rep.Write(g.Stdout, g.Stderr)
	}
	return err
}
