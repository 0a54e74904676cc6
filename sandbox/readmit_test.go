package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/internal/kbgenbin"
	"github.com/gpu-mode/kbgen/sandbox/dockerargv"
	"github.com/gpu-mode/kbgen/sandbox/dockerargv/dockerargvtest"
	"github.com/gpu-mode/kbgen/sandbox/gpuhealth"
	"github.com/gpu-mode/kbgen/sandbox/gpuhealth/gpuhealthtest"
	"github.com/gpu-mode/kbgen/sandbox/lease"
)

// TestRecordExit: exit 75 counts a machine fault, any other exit ends the
// row; the FaultLimit-th in a row says the agent stays out until its GPUs
// pass; a job without GPUs is not counted.
func TestRecordExit(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	j := &Job{Spec: &dockerargv.Spec{GPUs: []string{gpuhealthtest.CleanUUID}}, lease: lease.Options{Dir: dir}}
	steps := []struct {
		code   int
		faults int
		out    bool
	}{{75, 1, false}, {75, 2, false}, {1, 0, false}, {75, 1, false}, {75, 2, false}, {75, 3, true}, {75, 4, true}, {0, 0, false}}
	for i, s := range steps {
		note := j.RecordExit(s.code)
		if got := gpuhealth.Faults(dir, j.Spec.GPUs); got != s.faults || (note != "") != s.out {
			t.Fatalf("step %d (exit %d): %d faults, note %q; want %d faults, out %v", i, s.code, got, note, s.faults, s.out)
		}
		if s.out && !strings.Contains(note, "stays out of rotation until its GPUs pass the clean-GPU check") {
			t.Errorf("note %q", note)
		}
	}
	none := &Job{Spec: &dockerargv.Spec{}, lease: lease.Options{Dir: dir}}
	if none.RecordExit(75) != "" {
		t.Error("a job without GPUs counted")
	}
}

// TestReadmit: `kbgen node check-gpu` checks an agent out of rotation
// (FaultLimit faults in a row) under its lease: clean, the count is
// cleared; dirty, 75 and the count kept. --if-out lets an agent with
// fewer faults start unchecked; by hand it always checks.
func TestReadmit(t *testing.T) {
	t.Parallel()
	clean, dirty := gpuhealthtest.GPURow(gpuhealthtest.CleanUUID, "1", "0"), gpuhealthtest.GPURow(gpuhealthtest.CleanUUID, "30000", "0")
	tests := []struct {
		name, state string
		faults      string // "" none
		ifOut       bool
		checked     bool
		want        string // refusal; "" passes
	}{
		{"out, now clean: back", clean, "3", true, true, ""},
		{"out, still dirty: stays out", dirty, "3", true, false, "30000 MiB in use"},
		{"not out: starts unchecked", dirty, "2", true, false, ""},
		{"no faults: starts unchecked", dirty, "", true, false, ""},
		{"by hand: always checked", dirty, "", false, false, "30000 MiB in use"},
		{"by hand, clean", clean, "5", false, true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path, dir := gpuhealthtest.StandInSMI(t, tt.state, ""), t.TempDir()
			file := gpuhealth.FaultFile(dir, []string{gpuhealthtest.CleanUUID})
			if tt.faults != "" {
				must(t, os.WriteFile(file, []byte(tt.faults+"\n"), 0o644))
			}
			env := map[string]string{"PATH": path, contract.EnvLeaseDir: dir, contract.EnvGPUUUID: gpuhealthtest.CleanUUID}
			r, err := Readmit(context.Background(), lookup(env), tt.ifOut, nil)
			gpuhealthtest.WantRefusal(t, err, tt.want)
			if r.Checked != tt.checked {
				t.Errorf("checked %v, want %v", r.Checked, tt.checked)
			}
			_, statErr := os.Stat(file)
			if kept := statErr == nil; kept != (tt.faults != "" && !tt.checked) {
				t.Errorf("fault count kept %v after %+v, %v", kept, r, err)
			}
			if lease.Locked(filepath.Join(dir, "gpu-"+gpuhealthtest.CleanUUID+".lock")) {
				t.Error("check-gpu kept the lease")
			}
		})
	}
}

// TestReadmitWithoutPlacement: an environment without the agent's GPU is
// a refusal naming what is missing.
func TestReadmitWithoutPlacement(t *testing.T) {
	t.Parallel()
	_, err := Readmit(context.Background(), lookup(map[string]string{}), true, nil)
	gpuhealthtest.WantRefusal(t, err, contract.EnvGPUUUID+" or "+contract.EnvGPURenderNode+" is not set")
}

// TestLeaseTimeoutIsNoFault: a job that waited out KBGEN_LEASE_WAIT exits
// 75, but the node was busy, not broken: it never counts toward taking
// the agent out (a multi-GPU agent would starve).
func TestLeaseTimeoutIsNoFault(t *testing.T) {
	l, _ := fakeDocker(t)
	env := jobEnv(t)
	env["BUILDKITE_BUILD_PATH"] = t.TempDir()
	env[contract.EnvLeaseWait] = "100ms"
	host := dockerargvtest.FakeHost(t, nil)
	j, err := NewJob(lookup(env), Request{Command: []string{"kbgen", "run"}, RunnerBinary: kbgenbin.Path(t), Host: &host})
	if err != nil {
		t.Fatal(err)
	}
	other := mustLease(t, j.Spec.GPUs, lease.Options{Dir: env[contract.EnvLeaseDir], Holder: "job 9 on agent node1-x8", Wait: time.Second})
	defer other.Release()
	for i := range FaultLimit + 1 {
		_, err := j.Run(context.Background(), l, t.TempDir())
		if exitcode.Of(err) != 75 {
			t.Fatalf("run %d: %v, want 75", i, err)
		}
		if note := j.RecordExit(exitcode.Of(err)); note != "" {
			t.Fatalf("run %d: a lease timeout counted as a machine fault: %s", i, note)
		}
	}
	if _, err := os.Stat(gpuhealth.FaultFile(env[contract.EnvLeaseDir], j.Spec.GPUs)); err == nil {
		t.Error("a fault count was written for lease timeouts")
	}
}
