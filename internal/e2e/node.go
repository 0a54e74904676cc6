package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/gpu-mode/kbgen/node"
)

// NodeAgent is one GPU agent of a node set up by `kbgen node install`.
type NodeAgent struct {
	Plan   node.Agent
	Queue  string
	Config string   // its buildkite-agent.cfg
	Env    []string // its agent.env, which systemd loads into the agent
}

// ReadNode reads the plan `kbgen node install --root root` wrote and each
// agent's config.
func ReadNode(root string) ([]NodeAgent, error) {
	data, err := os.ReadFile(filepath.Join(root, node.PlanFile))
	if err != nil {
		return nil, fmt.Errorf("no node installed under %s (run kbgen node install): %w", root, err)
	}
	plan, err := node.ParsePlan(data)
	if err != nil {
		return nil, err
	}
	var out []NodeAgent
	for _, a := range plan.Agents {
		dir := filepath.Join(root, node.ConfigDir, a.ID)
		na := NodeAgent{Plan: a, Queue: plan.Queue, Config: filepath.Join(dir, "buildkite-agent.cfg")}
		if na.Env, err = readEnvFile(filepath.Join(dir, "agent.env")); err != nil {
			return nil, err
		}
		out = append(out, na)
	}
	return out, nil
}

func readEnvFile(path string) ([]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var env []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") || !strings.Contains(line, "=") {
			continue
		}
		env = append(env, line)
	}
	return env, sc.Err()
}

// Prepare copies the agent's hooks (environment, post-checkout) into
// dir/hooks and its config into dir/buildkite-agent.cfg, and returns the
// config's copy for StartAgent. Under a staging root the copies point at
// the root's pinned plugin and verification key (the agent's
// job-verification-jwks-path, the sandbox's KBGEN_VERIFICATION_KEY)
// instead of the node paths they were rendered for; under / they are the
// files as installed.
func (na NodeAgent) Prepare(root, dir string) (string, error) {
	return prepare(root, filepath.Join(root, node.ConfigDir, na.Plan.ID), dir)
}

// ControlAgent is the control agent `kbgen node install --control` wrote.
type ControlAgent struct {
	Config string // its buildkite-agent.cfg
}

// ReadControl finds the control agent installed under root.
func ReadControl(root string) (ControlAgent, error) {
	cfg := filepath.Join(root, node.ControlDir, "buildkite-agent.cfg")
	if _, err := os.Stat(cfg); err != nil {
		return ControlAgent{}, fmt.Errorf("no control agent installed under %s (run kbgen node install --control): %w", root, err)
	}
	return ControlAgent{Config: cfg}, nil
}

// Prepare copies the control agent's hooks (environment, checkout) and
// config into dir, as NodeAgent.Prepare does; under a staging root the
// hook exports the root's signing key and registry.
func (ca ControlAgent) Prepare(root, dir string) (string, error) {
	return prepare(root, filepath.Join(root, node.ControlDir), dir)
}

// prepare copies an installed agent directory's hooks and config into
// dir, rerooted, and returns the config's copy.
func prepare(root, agentDir, dir string) (string, error) {
	src := filepath.Join(agentDir, "hooks")
	dst := filepath.Join(dir, "hooks")
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return "", err
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		return "", err
	}
	for _, e := range entries {
		if err := copyRerooted(filepath.Join(src, e.Name()), filepath.Join(dst, e.Name()), root, 0o755); err != nil {
			return "", err
		}
	}
	cfg := filepath.Join(dir, "buildkite-agent.cfg")
	return cfg, copyRerooted(filepath.Join(agentDir, "buildkite-agent.cfg"), cfg, root, 0o644)
}

// copyRerooted copies a rendered file, pointing its node paths (the pinned
// plugin, the verification key, the control agent's key and registry)
// under root.
func copyRerooted(src, dst, root string, mode os.FileMode) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	b = bytes.ReplaceAll(b, []byte(node.PluginDir), []byte(filepath.Join(root, node.PluginDir)))
	b = bytes.ReplaceAll(b, []byte(node.JWKSFile), []byte(filepath.Join(root, node.JWKSFile)))
	b = bytes.ReplaceAll(b, []byte(node.ControlDir+"/"), []byte(filepath.Join(root, node.ControlDir)+"/"))
	return os.WriteFile(dst, b, mode)
}
