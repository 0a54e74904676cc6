package node

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os/user"
	"strconv"
	"strings"
	"syscall"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/registry"
	"github.com/gpu-mode/kbgen/signing"
)

// rel is an installed path as d.Root (an fs.FS of "/") names it.
func rel(p string) string { return strings.TrimPrefix(p, "/") }

// isControl reports whether `kbgen node install --control` wrote this
// machine's agent: doctor then checks a control host, not a GPU node.
func (d *Doctor) isControl() bool {
	_, err := fs.Stat(d.Root, rel(ControlDir+"/buildkite-agent.cfg"))
	return err == nil
}

// runControl checks a control host: its agent's queue, the signing key
// (private, 0600, the agent user's alone), the registry the bootstrap
// reads, the token, kbgen and the agent, the unit; and that no GPU agents
// share the machine (a vendor's job must never run next to the key).
func (d *Doctor) runControl(ctx context.Context) []Check {
	out := []Check{d.checkControlConfig(), d.checkSigningKey(), d.checkControlVendors(), d.checkToken()}
	if _, err := fs.Stat(d.Root, rel(PlanFile)); err == nil {
		out = append(out, fail("no GPU agents", "%s exists: this host also runs GPU agents, whose jobs would run next to the signing key; keep control agents on their own machine", PlanFile))
	}
	return append(out, d.checkAgentVersion(ctx, ControlUnit), d.checkUnit(ctx, ControlUnit))
}

func (d *Doctor) checkControlConfig() Check {
	const name = "control agent installed"
	cfg, err := fs.ReadFile(d.Root, rel(ControlDir+"/buildkite-agent.cfg"))
	if err != nil {
		return fail(name, "%v", err)
	}
	want := `tags="queue=` + contract.ControlQueue + `"`
	if !bytes.Contains(cfg, []byte(want)) {
		return fail(name, "%s/buildkite-agent.cfg lacks %s: the settings steps' bootstrap would never reach it; re-run kbgen node install --control", ControlDir, want)
	}
	for _, hook := range []string{"environment", "checkout"} {
		if _, err := fs.Stat(d.Root, rel(ControlDir+"/hooks/"+hook)); err != nil {
			return fail(name, "no %s hook (%v): re-run kbgen node install --control", hook, err)
		}
	}
	return pass(name, "queue %s (%s)", contract.ControlQueue, ControlDir)
}

// checkSigningKey: the key the environment hook exports must be a private
// JWKS that only the unit's user can read.
func (d *Doctor) checkSigningKey() Check {
	const name = "signing key"
	fi, err := fs.Stat(d.Root, rel(SigningKeyFile))
	if err != nil {
		return fail(name, "%v: re-run kbgen node install --control --signing-key FILE", err)
	}
	if perm := fi.Mode().Perm(); perm != 0o600 {
		return fail(name, "%s has mode %04o, want 0600: others on this host can read it; chmod 600 it and replace the key (kbgen keygen) if anyone may have copied it", SigningKeyFile, perm)
	}
	data, err := fs.ReadFile(d.Root, rel(SigningKeyFile))
	if err != nil {
		return fail(name, "%v", err)
	}
	set, err := signing.ParsePrivateSet(data)
	if err != nil {
		return fail(name, "%s: %v", SigningKeyFile, err)
	}
	agentUser := d.unitSetting(ControlUnit, "User")
	if err := ownedByUser(fi, agentUser); err != nil {
		return fail(name, "%s: %v (kbgen node install --control sets it)", SigningKeyFile, err)
	}
	return pass(name, "%s: key %s, 0600, owned by %s", SigningKeyFile, strings.Join(signing.KeyIDs(set), ", "), agentUser)
}

// ownedByUser checks that fi belongs to the named user: the agent runs as
// it, and must read the key.
func ownedByUser(fi fs.FileInfo, name string) error {
	if name == "" {
		return errors.New("no User= in " + ControlUnit)
	}
	u, err := user.Lookup(name)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return errors.New("cannot read its owner")
	}
	if strconv.Itoa(int(st.Uid)) != u.Uid {
		return errors.New("owned by uid " + strconv.Itoa(int(st.Uid)) + ", not by " + name + " (uid " + u.Uid + "), who runs the agent")
	}
	return nil
}

func (d *Doctor) checkControlVendors() Check {
	const name = "vendor registry"
	data, err := fs.ReadFile(d.Root, rel(ControlVendorsFile))
	if errors.Is(err, fs.ErrNotExist) {
		return pass(name, "the one built into kbgen (no %s)", ControlVendorsFile)
	}
	if err != nil {
		return fail(name, "%v", err)
	}
	reg, err := registry.Parse(data)
	if err != nil {
		return fail(name, "%s: %v", ControlVendorsFile, err)
	}
	return pass(name, "%s: %s", ControlVendorsFile, strings.Join(reg.Queues(), ", "))
}

func (d *Doctor) checkToken() Check {
	const name = "agent token"
	if _, err := fs.Stat(d.Root, rel(TokenFile)); err != nil {
		return fail(name, "%v: re-run kbgen node install with --token-file (the control agents' token)", err)
	}
	return pass(name, "%s", TokenFile)
}
