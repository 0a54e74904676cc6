package node

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/internal/gpuid"
	"github.com/gpu-mode/kbgen/internal/nvsmi"
)

// TestHostileInventoryRefused: an inventory whose UUIDs or PCI address
// carry a line of their own (a sudoers rule, shell) is refused as bad
// input (exit 2) before anything is written: no sudoers drop-in, no
// hook, no agent.env. testdata/hostile holds the inventories.
func TestHostileInventoryRefused(t *testing.T) {
	t.Parallel()
	// want is text only where the message is the contract: it tells the
	// operator to update the driver.
	tests := []struct {
		file, box, queue, mig string
		kind                  func(error) bool
		want                  string
	}{
		{"gpu-uuid-sudoers-line", "l4x4", "nvidia-l4", "", badID("NVIDIA GPU uuid", "GPU-1f4e1111-2b3c-4d5e-8f90-a1b2c3d4e501\nDefaults !authenticate\n#"), ""},
		{"gpu-uuid-shell", "l4x4", "nvidia-l4", "", badID("NVIDIA GPU uuid", "GPU-'; touch /tmp/pwned; '"), ""},
		{"pci-bus-newline", "l4x4", "nvidia-l4", "", isErr(nvsmi.ErrBusID), ""},
		{"mig-uuid-sudoers-line", "h100x8", "nvidia-h100", "nvidia-h100-mig", badID("MIG uuid", "MIG-0e6c0000-5d4b-5a3c-9b2a-1f0e9d8c7b60\nDefaults !authenticate\n#"), ""},
		{"mig-uuid-legacy", "h100x8", "nvidia-h100", "nvidia-h100-mig", badID("MIG uuid", "MIG-GPU-5a1c0000-4c1e-2f6a-9d0b-e3f1a2b40000/1/0"), "pre-R470"},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			_, err := Install(context.Background(), InstallRequest{
				Source: Source{
					Sysfs: "testdata/" + tc.box + "/sys", NVMLInventory: filepath.Join("testdata", "hostile", tc.file+".json"),
					ReserveCores: 1, ReserveMemory: "16g", Queue: tc.queue, MIGQueue: tc.mig,
				},
				Inputs:  Inputs{Root: root, EnvToken: fakeToken},
				Options: InstallOptions{AllowGPUReset: true},
			})
			if exitcode.Of(err) != exitcode.Usage || !tc.kind(err) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("install: %v (exit %d), want exit 2 for the hostile value, saying %q", err, exitcode.Of(err), tc.want)
			}
			var written []string
			_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
				if err == nil && !d.IsDir() {
					written = append(written, p)
				}
				return err
			})
			if len(written) > 0 {
				t.Errorf("a refused install wrote %v", written)
			}
		})
	}
}

// TestRenderRefusesHostilePlan: a plan that did not come through the
// readers (an edited plan.json) still cannot put a line of its own into
// the hook, agent.env or the sudoers drop-in, and the agents' user is
// one login name, never a sudoers keyword, group, netgroup, uid or alias.
func TestRenderRefusesHostilePlan(t *testing.T) {
	t.Parallel()
	userRefused := func(err error) bool { return isOption(err, "User") }
	// want is text because the message is the contract: it names the
	// agent or user and quotes the hostile value escaped, never as a line
	// of its own. kind is the refusal's: a plan value or an option.
	tests := []struct {
		name string
		edit func(*Plan, *InstallOptions)
		kind func(error) bool
		want string
	}{
		{"uuid with a sudoers line", func(p *Plan, _ *InstallOptions) { p.Agents[1].GPU.UUID += "\nDefaults !authenticate\n#" }, unsafePlan("gpu1"), `agent gpu1: GPU 1: NVIDIA GPU uuid`},
		{"shape uuid", func(p *Plan, _ *InstallOptions) {
			p.Agents = append(p.Agents, Agent{ID: "gpux2-0", GPU: p.Agents[0].GPU, GPUs: []GPU{p.Agents[0].GPU, {Index: 1, UUID: "GPU-x y"}}})
		}, unsafePlan("gpux2-0"), `agent gpux2-0: GPU 1: NVIDIA GPU uuid "GPU-x y"`},
		{"pci with a newline", func(p *Plan, _ *InstallOptions) { p.Agents[0].GPU.PCIBus = "0000:18:00.0\nALL ALL=(ALL) ALL" }, unsafePlan("gpu0"), "PCI address"},
		{"agent id", func(p *Plan, _ *InstallOptions) { p.Agents[0].ID = "gpu0/../../x" }, unsafePlan("gpu0/../../x"), `agent id "gpu0/../../x"`},
		{"cpuset with a space", func(p *Plan, _ *InstallOptions) { p.Agents[0].CPUSet = "2-4 FOO=1" }, unsafePlan("gpu0"), `KERNELBOT_CPUSET="2-4 FOO=1"`},
		{"memory with a newline", func(p *Plan, _ *InstallOptions) { p.Agents[0].Memory = "8g\nLD_PRELOAD=/tmp/x" }, unsafePlan("gpu0"), "a placement value must be"},
		{"user ALL", func(_ *Plan, o *InstallOptions) { o.User = "ALL" }, userRefused, `user "ALL": sudoers reads an upper-case name as an alias`},
		{"user alias", func(_ *Plan, o *InstallOptions) { o.User = "ADMINS" }, userRefused, "as an alias"},
		{"user group", func(_ *Plan, o *InstallOptions) { o.User = "%sudo" }, userRefused, `user "%sudo": want a login name`},
		{"user netgroup", func(_ *Plan, o *InstallOptions) { o.User = "+admins" }, userRefused, "want a login name"},
		{"user uid", func(_ *Plan, o *InstallOptions) { o.User = "#0" }, userRefused, "want a login name"},
		{"user with a newline", func(_ *Plan, o *InstallOptions) { o.User = "bk\nALL" }, userRefused, "want a login name"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := planFixture(t, "h100x8", defaultOpts)
			opts := InstallOptions{Queue: "nvidia-h100", AllowGPUReset: true}
			tc.edit(p, &opts)
			files, err := Render(p, opts)
			if !tc.kind(err) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Render: %v (%T), want an error saying %s", err, err, tc.want)
			}
			if files != nil {
				t.Errorf("Render returned %d files with its error", len(files))
			}
		})
	}
}

// TestSudoersVisudo: the reset drop-in kbgen renders for each reference
// machine is one sudo accepts (visudo -c, sudo's own parser), and Install
// refuses to write one that visudo refuses.
func TestSudoersVisudo(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("visudo"); err != nil {
		t.Skip("SKIP: visudo is not installed (apt-get install sudo): the rendered sudoers drop-in was not checked by sudo's parser")
	}
	for _, tc := range []struct{ box, queue string }{{"h100x8", "nvidia-h100"}, {"mi300xx8", "amd-mi300"}} {
		t.Run(tc.box, func(t *testing.T) {
			t.Parallel()
			data, err := resetSudoers(planFixture(t, tc.box, defaultOpts), DefaultUser)
			if err != nil {
				t.Fatal(err)
			}
			if note, err := Visudo(context.Background(), data); note != "" || err != nil {
				t.Errorf("visudo on the rendered drop-in: note %q, error %v\n%s", note, err, data)
			}
		})
	}
	t.Run("refused", func(t *testing.T) {
		t.Parallel()
		_, err := Visudo(context.Background(), []byte("buildkite-agent ALL=(root) NOPASSWD: /usr/bin/nvidia-smi --gpu-reset -i GPU-1, \n"))
		if !errors.Is(err, ErrSudoersRefused) {
			t.Errorf("visudo on a broken drop-in: %v, want refused", err)
		}
	})
}

// TestInstallChecksSudoers: Install runs the check on the drop-in, writes
// nothing when it refuses, and puts its note (visudo absent) on the plan.
func TestInstallChecksSudoers(t *testing.T) {
	t.Parallel()
	req := func(root string, check SudoersCheck) InstallRequest {
		return InstallRequest{
			Source:       Source{Sysfs: "testdata/l4x4/sys", NVMLInventory: "testdata/l4x4/nvml-inventory.json", ReserveCores: 1, ReserveMemory: "16g", Queue: "nvidia-l4"},
			Inputs:       Inputs{Root: root, EnvToken: fakeToken},
			Options:      InstallOptions{AllowGPUReset: true},
			CheckSudoers: check,
		}
	}
	var seen []byte
	refuse := func(_ context.Context, data []byte) (string, error) {
		seen = data
		return "", errors.New("visudo -c refuses it")
	}
	root := t.TempDir()
	if _, err := Install(context.Background(), req(root, refuse)); err == nil || !bytes.Contains(seen, []byte("NOPASSWD: /usr/bin/nvidia-smi --gpu-reset -i GPU-")) {
		t.Fatalf("install with a refusing check: %v; the check saw %q", err, seen)
	}
	if entries, _ := os.ReadDir(root); len(entries) > 0 {
		t.Errorf("a refused drop-in still wrote %v", entries)
	}
	absent := func(context.Context, []byte) (string, error) { return "sudoers not checked: visudo absent", nil }
	rep, err := Install(context.Background(), req(t.TempDir(), absent))
	if err != nil || !slices.Contains(rep.Plan.Notes, "sudoers not checked: visudo absent") {
		t.Errorf("install without visudo: %v; notes %q", err, rep.Plan.Notes)
	}
}

// TestSudoersCommand: sudoers(5)'s escapes for ',', ':' and '='; an
// argument that would split (whitespace), comment ('#'), continue ('\')
// or add a rule (a newline) is refused, not escaped.
func TestSudoersCommand(t *testing.T) {
	t.Parallel()
	got, err := sudoersCommand([]string{"/opt/rocm/bin/amd-smi", "reset", "-g", "0000:18:00.0", "-G", "a=b,c"})
	if want := `/opt/rocm/bin/amd-smi reset -g 0000\:18\:00.0 -G a\=b\,c`; err != nil || got != want {
		t.Errorf("sudoersCommand = %q, %v; want %q", got, err, want)
	}
	for _, arg := range []string{"GPU-1 ALL", "GPU-1#", "GPU-1\nALL ALL=(ALL) ALL", `GPU-1\`, "", "GPU-1\t"} {
		if got, err := sudoersCommand([]string{"/usr/bin/nvidia-smi", "-i", arg}); err == nil {
			t.Errorf("argument %q accepted as %q", arg, got)
		}
	}
}

// badID is a *gpuid.Error for the hostile value, as the reader saw it.
func badID(kind, value string) func(error) bool {
	return func(err error) bool {
		ge, ok := errors.AsType[*gpuid.Error](err)
		return ok && ge.Kind == kind && ge.Value == value
	}
}

// unsafePlan is an *UnsafePlanError for agent.
func unsafePlan(agent string) func(error) bool {
	return func(err error) bool {
		ue, ok := errors.AsType[*UnsafePlanError](err)
		return ok && ue.Agent == agent
	}
}
