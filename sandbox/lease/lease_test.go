package lease

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/internal/syncbuf"
	"github.com/gpu-mode/kbgen/sandbox/refusal"
)

// mustBusy is err as the BusyError of a wait for gpu that ran out: a
// refusal (75), another agent may take the job.
func mustBusy(t *testing.T, err error, gpu string) *BusyError {
	t.Helper()
	var busy *BusyError
	if !errors.As(err, &busy) || !refusal.IsRefused(err) || busy.GPU != gpu {
		t.Fatalf("%v, want a refusal: %s stayed busy", err, gpu)
	}
	return busy
}

// leaseOpts is a lease in dir for holder, waiting at most wait, logging
// into log.
func leaseOpts(dir, holder string, wait time.Duration, log *syncbuf.Buffer) Options {
	o := Options{Dir: dir, Wait: wait, Holder: holder}
	if log != nil {
		o.Logf = func(f string, a ...any) { fmt.Fprintf(log, f+"\n", a...) }
	}
	return o
}

func mustLease(t *testing.T, ids []string, o Options) *Lease {
	t.Helper()
	l, err := Acquire(context.Background(), ids, o)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestLeaseExcludes: a GPU is leased to one job at a time, disjoint sets
// do not wait on each other, and the wait is bounded: beyond it the job
// is refused (75) with the holder named.
func TestLeaseExcludes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a := mustLease(t, []string{"GPU-a", "GPU-b"}, leaseOpts(dir, "job A", time.Second, nil))

	start := time.Now()
	c := mustLease(t, []string{"GPU-c"}, leaseOpts(dir, "job C", 0, nil))
	if time.Since(start) > time.Second {
		t.Errorf("a disjoint GPU waited %s", time.Since(start))
	}
	c.Release()

	var log syncbuf.Buffer
	_, err := Acquire(context.Background(), []string{"GPU-b"}, leaseOpts(dir, "job B", 200*time.Millisecond, &log))
	busy := mustBusy(t, err, "GPU-b")
	if !strings.HasPrefix(busy.Holder, "job A since ") {
		t.Errorf("a held GPU: holder %q, want job A since when", busy.Holder)
	}
	// The message is the contract: the job's log tells the operator who holds the GPU.
	if !strings.Contains(err.Error(), "GPU-b is still held by "+busy.Holder+" after waiting ") {
		t.Errorf("the refusal does not name the GPU and its holder: %v", err)
	}
	if !strings.Contains(log.String(), "waiting for GPU GPU-b (in use, 0s so far): held by job A since") {
		t.Errorf("the job log does not show the wait and the holder:\n%s", log.String())
	}

	a.Release()
	b := mustLease(t, []string{"GPU-b"}, leaseOpts(dir, "job B", time.Second, nil))
	b.Release()
}

// TestLeaseWriterPreference: an N-GPU job waiting for a GPU busy with a
// one-GPU job keeps new one-GPU jobs off every GPU of its set, so it gets
// them as soon as the jobs already running end.
func TestLeaseWriterPreference(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	one := mustLease(t, []string{"GPU-0"}, leaseOpts(dir, "one-GPU job on GPU-0", time.Second, nil))

	got := make(chan error, 1)
	var wide *Lease
	go func() {
		var err error
		wide, err = Acquire(context.Background(), []string{"GPU-0", "GPU-1", "GPU-2", "GPU-3"}, leaseOpts(dir, "4-GPU job", 10*time.Second, nil))
		got <- err
	}()
	waitUntil(t, func() bool { return Locked(filepath.Join(dir, "gpu-GPU-3.intent")) }, "the 4-GPU job to claim GPU-3")

	// GPU-1 is idle, but claimed: a new one-GPU job must not slip in.
	_, err := Acquire(context.Background(), []string{"GPU-1"}, leaseOpts(dir, "late one-GPU job", 300*time.Millisecond, nil))
	mustBusy(t, err, "GPU-1")
	one.Release()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the 4-GPU job did not get its GPUs after the one-GPU job ended")
	}
	if Locked(filepath.Join(dir, "gpu-GPU-1.intent")) {
		t.Error("the 4-GPU job kept its intents after taking its GPUs")
	}
	wide.Release()
}

// TestLeaseRefusesPathNames: ids name files inside the lease directory.
func TestLeaseRefusesPathNames(t *testing.T) {
	t.Parallel()
	for _, id := range []string{"../etc/x", "a/b", "..", ""} {
		if _, err := Acquire(context.Background(), []string{id}, leaseOpts(t.TempDir(), "x", 0, nil)); !refusal.IsRefused(err) {
			t.Errorf("id %q: %v, want a refusal", id, err)
		}
	}
}

// TestLeaseCancel: a job cancelled while it waits stops waiting.
func TestLeaseCancel(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	held := mustLease(t, []string{"GPU-x"}, leaseOpts(dir, "holder", time.Second, nil))
	defer held.Release()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := Acquire(ctx, []string{"GPU-x"}, leaseOpts(dir, "w", time.Minute, nil)); err != context.DeadlineExceeded {
		t.Errorf("cancelled wait: %v", err)
	}
}

// TestLeaseKilledHolderFreesIt: a holder killed with SIGKILL (no clean
// up at all) frees its GPUs: the kernel drops the flock.
func TestLeaseKilledHolderFreesIt(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	holder, ready := startLeaseHelper(t, dir, "GPU-k", "0")
	<-ready
	_, err := Acquire(context.Background(), []string{"GPU-k"}, leaseOpts(dir, "w", 200*time.Millisecond, nil))
	if busy := mustBusy(t, err, "GPU-k"); !strings.Contains(busy.Holder, "helper") {
		t.Errorf("while the helper holds it: holder %q, want the helper", busy.Holder)
	}
	if err := holder.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = holder.Wait()
	l := mustLease(t, []string{"GPU-k"}, leaseOpts(dir, "w", 2*time.Second, nil))
	l.Release()
}

// TestLeaseConcurrentProcesses: many processes lease overlapping GPU sets
// (one GPU, two, all four) in a loop; while holding, each creates a
// marker per GPU with O_EXCL, so two holders of one GPU would collide.
func TestLeaseConcurrentProcesses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sets := []string{"GPU-0", "GPU-1", "GPU-2", "GPU-3", "GPU-0,GPU-1", "GPU-2,GPU-3", "GPU-0,GPU-1,GPU-2,GPU-3", "GPU-1"}
	var wg sync.WaitGroup
	errs := make(chan error, len(sets))
	for _, set := range sets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := helperCmd(dir, set, "5")
			if out, err := cmd.CombinedOutput(); err != nil {
				errs <- fmt.Errorf("%s: %v\n%s", set, err, out)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// leaseHelperEnv runs TestLeaseHelper as a lease-holding process.
const leaseHelperEnv = "KBGEN_TEST_LEASE_HELPER"

func helperCmd(dir, gpus, rounds string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^TestLeaseHelper$")
	cmd.Env = append(os.Environ(), leaseHelperEnv+"="+dir+"|"+gpus+"|"+rounds)
	return cmd
}

// startLeaseHelper starts a helper that holds gpus until killed; ready
// closes once it holds them.
func startLeaseHelper(t *testing.T, dir, gpus, rounds string) (*exec.Cmd, <-chan struct{}) {
	t.Helper()
	cmd := helperCmd(dir, gpus, rounds)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == "held" {
				close(ready)
				_, _ = bufio.NewReader(out).WriteTo(discard{})
				return
			}
		}
	}()
	return cmd, ready
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// TestLeaseHelper is not a test: run by the tests above as a separate
// process (KBGEN_TEST_LEASE_HELPER=dir|gpu,gpu|rounds). rounds 0 holds
// until killed; otherwise it leases that many times, checking exclusion.
func TestLeaseHelper(t *testing.T) {
	spec := os.Getenv(leaseHelperEnv)
	if spec == "" {
		t.Skip("helper process for the lease tests")
	}
	parts := strings.Split(spec, "|")
	dir, ids := parts[0], strings.Split(parts[1], ",")
	o := leaseOpts(dir, fmt.Sprintf("helper pid %d", os.Getpid()), 30*time.Second, nil)
	if parts[2] == "0" {
		mustLease(t, ids, o)
		fmt.Println("held")
		time.Sleep(time.Minute)
		return
	}
	rounds, _ := strconv.Atoi(parts[2])
	for range rounds {
		l := mustLease(t, ids, o)
		var markers []string
		for _, id := range ids {
			m := filepath.Join(dir, "holding-"+id)
			f, err := os.OpenFile(m, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
			if err != nil {
				t.Fatalf("GPU %s double-booked: %v", id, err)
			}
			f.Close()
			markers = append(markers, m)
		}
		time.Sleep(20 * time.Millisecond)
		for _, m := range markers {
			os.Remove(m)
		}
		l.Release()
	}
}

func waitUntil(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
