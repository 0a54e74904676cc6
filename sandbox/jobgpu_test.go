package sandbox

import (
	"bytes"
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/internal/kbgenbin"
	"github.com/gpu-mode/kbgen/sandbox/dockerargv/dockerargvtest"
	"github.com/gpu-mode/kbgen/sandbox/gpuhealth/gpuhealthtest"
	"github.com/gpu-mode/kbgen/sandbox/lease"
	"github.com/gpu-mode/kbgen/sandbox/refusal"
)

// TestJobRunRefusesADirtyGPU: kbgen sandbox checks its leased GPU before
// docker run; a dirty one means no container and exit 75.
func TestJobRunRefusesADirtyGPU(t *testing.T) {
	l, dir := fakeDocker(t)
	env := jobEnv(t)
	env["BUILDKITE_BUILD_PATH"] = t.TempDir()
	env["PATH"] = gpuhealthtest.StandInSMI(t, gpuhealthtest.GPURow(gpuhealthtest.CleanUUID, "1", "0"), gpuhealthtest.CleanUUID+", 999, miner, 60000\n")
	host := dockerargvtest.FakeHost(t, nil)
	j, err := NewJob(lookup(env), Request{Command: []string{"kbgen", "run"}, RunnerBinary: kbgenbin.Path(t), Host: &host})
	if err != nil {
		t.Fatal(err)
	}
	_, err = j.Run(context.Background(), l, t.TempDir())
	// The message is the contract: the job log names the process on the GPU for the operator.
	if exitcode.Of(err) != 75 || !refusal.IsRefused(err) || !strings.Contains(err.Error(), "pid 999, miner") {
		t.Fatalf("dirty GPU: %v, want a refusal (75) naming the process", err)
	}
	if got := calls(t, dir); slices.ContainsFunc(got, func(c string) bool { return strings.HasPrefix(c, "run ") }) {
		t.Errorf("docker ran on a dirty GPU: %v", got)
	}
	if lease.Locked(filepath.Join(env[contract.EnvLeaseDir], "gpu-"+gpuhealthtest.CleanUUID+".lock")) {
		t.Error("the refused job kept its lease")
	}
}

// TestJobRunRemovesStaleBeforeCheck: a container a SIGKILLed sandbox left
// on the leased GPU, its process still on it, is removed before the
// clean-GPU check (under the lease), so the check sees the GPU it freed
// and the job runs; the check is not skipped (a stand-in nvidia-smi
// answers it).
func TestJobRunRemovesStaleBeforeCheck(t *testing.T) {
	l, dir := fakeDocker(t)
	env := jobEnv(t)
	env["BUILDKITE_BUILD_PATH"] = t.TempDir()
	smi := gpuhealthtest.StandInSMI(t, gpuhealthtest.GPURow(gpuhealthtest.CleanUUID, "1", "0"), gpuhealthtest.CleanUUID+", 999, python3, 60000\n")
	env["PATH"] = smi
	touch(t, dir, "containers", "kbgen-leftover\t"+gpuhealthtest.CleanUUID+"\n")
	touch(t, dir, "on-rm", ": >"+filepath.Join(smi, "apps.csv")+"\n")
	host := dockerargvtest.FakeHost(t, nil)
	j, err := NewJob(lookup(env), Request{Command: []string{"kbgen", "run"}, RunnerBinary: kbgenbin.Path(t), Host: &host})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.Run(context.Background(), l, t.TempDir()); err != nil {
		t.Fatalf("refused though the leftover holding the GPU was the sandbox's to remove: %v", err)
	}
	got := calls(t, dir)
	if len(got) < 3 || got[0] != "ps" || got[1] != "rm kbgen-leftover" || !strings.HasPrefix(got[2], "run ") {
		t.Errorf("docker calls = %q, want the leftover removed, then the run", got)
	}
	if log := l.Log.(*bytes.Buffer).String(); !strings.Contains(log, "removed stale container kbgen-leftover (left by a killed job on GPU "+gpuhealthtest.CleanUUID) {
		t.Errorf("the removal is not in the job log: %q", log)
	}
}
