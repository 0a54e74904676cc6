package qualify

import (
	"context"
	"errors"
	"io/fs"
	"strings"
	"testing"

	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/node"
)

// l40s is the node package's 2×L40S fixture as the machine flags name it.
func l40s(queue string) node.Source {
	return node.Source{Sysfs: "../node/testdata/l40sx2/sys", NvidiaSMI: "../node/testdata/l40sx2/nvidia-smi.csv",
		ReserveCores: 1, ReserveMemory: "16g", Queue: queue}
}

func TestPrepare(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		setup        Setup
		wantCode     int
		wantIs       error  // the cause, where it has a kind
		wantErr      string // the flag or file the operator must fix, named
		wantLauncher string
		wantNote     string
	}{
		{name: "pinned processes, GPU part off", setup: Setup{Machine: l40s(""), NoSandbox: true, GPU: GPUOff},
			wantLauncher: (&Direct{}).Name(), wantNote: "--gpu off"},
		{name: "no queue, so no image", setup: Setup{Machine: l40s(""), GPU: GPUAuto},
			wantCode: exitcode.Usage, wantIs: ErrNoImage, wantErr: "--image"},
		{name: "a registry that does not load", setup: Setup{Machine: l40s("nvidia-l40s"), Vendors: "testdata/none.yaml", GPU: GPUAuto},
			wantCode: exitcode.Usage, wantIs: fs.ErrNotExist, wantErr: "none.yaml"},
		{name: "the machine's own usage error", setup: Setup{Machine: node.Source{ReserveMemory: "lots"}, NoSandbox: true},
			wantCode: exitcode.Usage, wantErr: "--reserve-memory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.setup.Root = t.TempDir()
			o, err := Prepare(context.Background(), tc.setup)
			if got := exitcode.Of(err); got != tc.wantCode {
				t.Fatalf("exit code %d (%v), want %d", got, err, tc.wantCode)
			}
			if tc.wantIs != nil && !errors.Is(err, tc.wantIs) {
				t.Errorf("err = %v, want %v", err, tc.wantIs)
			}
			if tc.wantErr != "" {
				// The message is the contract: it names what the operator must fix.
				if !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("err = %v, want it to say %q", err, tc.wantErr)
				}
				return
			}
			if o.Plan == nil || len(o.Plan.Agents) != 2 || o.Launcher.Name() != tc.wantLauncher || o.GPUNote != tc.wantNote || o.GPU != nil {
				t.Errorf("options %+v: want the fixture's 2 agents via %q, GPU note %q", o, tc.wantLauncher, tc.wantNote)
			}
		})
	}
}

// The GPU part's rules, apart from finding a GPU runner (this machine's).
func TestGPUPartRules(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		setup    Setup
		wantCode int
		wantNote string
	}{
		{"off", Setup{GPU: GPUOff}, exitcode.OK, "--gpu off"},
		{"off without the sandbox", Setup{GPU: GPUOff, NoSandbox: true}, exitcode.OK, "--gpu off"},
		{"auto in the sandbox: skipped, and why", Setup{GPU: GPUAuto}, exitcode.OK, "the GPU calibration runs with --no-sandbox only (the host's python3 with torch)"},
		{"on in the sandbox: refused", Setup{GPU: GPUOn}, exitcode.Usage, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var o Options
			err := tc.setup.gpuPart(context.Background(), &o)
			if got := exitcode.Of(err); got != tc.wantCode || o.GPUNote != tc.wantNote {
				t.Errorf("exit %d (%v), note %q; want exit %d, note %q", got, err, o.GPUNote, tc.wantCode, tc.wantNote)
			}
		})
	}
}

// Without --image the containers run the registry's image for the plan's
// queue.
func TestImageDefault(t *testing.T) {
	t.Parallel()
	p := &node.Plan{Queue: "nvidia-l40s"}
	got, err := Setup{}.image(p)
	if err != nil || !strings.Contains(got, "kbgen-runner-cuda") {
		t.Errorf("image %q, %v: want the registry's CUDA runner image", got, err)
	}
	if got, err := (Setup{Image: "mine:1"}).image(p); got != "mine:1" || err != nil {
		t.Errorf("--image mine:1 gave %q, %v", got, err)
	}
}
