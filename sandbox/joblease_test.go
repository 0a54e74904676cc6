package sandbox

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/kbgenbin"
	"github.com/gpu-mode/kbgen/sandbox/dockerargv/dockerargvtest"
	"github.com/gpu-mode/kbgen/sandbox/lease"
	"github.com/gpu-mode/kbgen/sandbox/refusal"
)

// TestJobRunHoldsTheLease: kbgen sandbox takes its GPUs' lease before
// docker run and holds it while the container runs; a GPU another job
// holds past the wait bound means no docker run and a refusal (75),
// with the wait and the holder in the job log.
func TestJobRunHoldsTheLease(t *testing.T) {
	if _, err := exec.LookPath("flock"); err != nil {
		t.Skip("flock(1) (util-linux) is not installed: the stand-in docker checks the lease with it")
	}
	l, dir := fakeDocker(t)
	env := jobEnv(t)
	env["BUILDKITE_BUILD_PATH"] = t.TempDir()
	env[contract.EnvLeaseWait] = "300ms"
	env[contract.EnvAgentName] = "node1-gpu3"
	host := dockerargvtest.FakeHost(t, nil)
	j, err := NewJob(lookup(env), Request{Command: []string{"kbgen", "run"}, RunnerBinary: kbgenbin.Path(t), Host: &host})
	if err != nil {
		t.Fatal(err)
	}
	lock := filepath.Join(env[contract.EnvLeaseDir], "gpu-"+j.Spec.GPUs[0]+".lock")
	touch(t, dir, "during", "flock -n "+lock+" true && echo free >"+dir+"/lease || echo held >"+dir+"/lease\n")

	other := mustLease(t, j.Spec.GPUs, lease.Options{Dir: env[contract.EnvLeaseDir], Holder: "job 9 on agent node1-x8", Wait: time.Second})
	_, err = j.Run(context.Background(), l, t.TempDir())
	var busy *lease.BusyError
	if !errors.As(err, &busy) || !refusal.IsRefused(err) || !strings.HasPrefix(busy.Holder, "job 9 on agent node1-x8 since ") {
		t.Fatalf("GPU held by another job: %v, want a refusal naming it", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "calls")); err == nil {
		t.Errorf("docker was called while the GPU was held: %v", calls(t, dir))
	}
	if log := l.Log.(*bytes.Buffer).String(); !strings.Contains(log, "waiting for GPU "+j.Spec.GPUs[0]) {
		t.Errorf("the job log does not show the wait:\n%s", log)
	}
	other.Release()

	if _, err := j.Run(context.Background(), l, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "lease")); strings.TrimSpace(string(b)) != "held" {
		t.Errorf("during docker run the GPU's lock was %q, want held", b)
	}
	if lease.Locked(lock) {
		t.Error("the lease outlived the run")
	}
}

func mustLease(t *testing.T, ids []string, o lease.Options) *lease.Lease {
	t.Helper()
	l, err := lease.Acquire(context.Background(), ids, o)
	if err != nil {
		t.Fatal(err)
	}
	return l
}
