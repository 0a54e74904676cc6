// Package lease is the node's GPU lease: one job per GPU across every
// agent of a node (a one-GPU agent and a multi-GPU agent share GPUs), by
// flock on files in one directory (/run/kbgen/gpu-<id>.lock and .intent),
// with a bounded wait and writer preference for a job waiting for several.
package lease

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
	"unicode"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/sandbox/refusal"
)

// Defaults. A step holds its GPUs at most its vendor's max-minutes
// (an hour); a job that waits longer than DefaultWait for one exits
// 75 and Buildkite gives it to another agent rather than hold a Buildkite
// job slot on a node that is busy.
const (
	DefaultDir  = "/run/kbgen"
	DefaultWait = 15 * time.Minute
	leasePoll   = 50 * time.Millisecond
	leaseReport = 30 * time.Second
)

// Options say where the node's GPU locks live and how long a job
// waits for them.
type Options struct {
	// Dir holds one lock file and one intent file per GPU; every agent of
	// the node uses the same one (contract.EnvLeaseDir, DefaultDir).
	Dir string
	// Wait bounds the whole wait (contract.EnvLeaseWait, DefaultWait).
	Wait time.Duration
	// Holder is this job as waiters see it: job id, agent, pid.
	Holder string
	// Logf reports the wait and who holds the GPU (the job log).
	Logf func(format string, args ...any)
}

// OptionsFromEnv reads the lease settings from the agent's
// environment; a bad KBGEN_LEASE_WAIT is a refusal (the agent is
// misconfigured).
func OptionsFromEnv(lookup contract.Lookup) (Options, error) {
	get := func(k string) string { v, _ := lookup(k); return strings.TrimSpace(v) }
	o := Options{Dir: get(contract.EnvLeaseDir), Wait: DefaultWait}
	if o.Dir == "" {
		o.Dir = DefaultDir
	}
	if v := get(contract.EnvLeaseWait); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return o, refusal.Refusef("%s: %q is not a duration like 15m", contract.EnvLeaseWait, v)
		}
		o.Wait = d
	}
	job := get(contract.EnvJobID)
	if job == "" {
		job = "a local run"
	}
	o.Holder = fmt.Sprintf("job %s on agent %s (pid %d)", job, orDash(get(contract.EnvAgentName)), os.Getpid())
	return o, nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// BusyError is a job that waited out KBGEN_LEASE_WAIT: a refusal
// (75), but the node was busy, not at fault, so it is no machine fault of
// the agent's (RecordExit). GPU and Holder say which GPU stayed held
// and by whom (the holder's lock file, made printable).
type BusyError struct {
	GPU    string
	Holder string
	err    error
}

func (e *BusyError) Error() string { return e.err.Error() }
func (e *BusyError) Unwrap() error { return e.err }

// Lease is the node-local hold on a set of GPUs: one flock per GPU, held
// while the container runs. The kernel drops a flock when its process
// dies, so a killed sandbox never leaves a GPU leased.
type Lease struct {
	locks []*os.File
}

// Acquire takes the GPUs named by ids (the planned run's GPUs) for this job.
//
// Two files per GPU: "<id>.intent" and "<id>.lock". A job first takes
// every intent, then every lock, then lets the intents go, each in one
// order (sorted ids) so two jobs never wait on each other. Holding the
// intent while it waits for a lock is the writer preference: an N-GPU job
// waiting for GPUs still busy with one-GPU jobs holds their intents, so
// no new one-GPU job gets in before it, and it waits at most for the jobs
// already running. Beyond o.Wait the answer is a refusal.RefusedError (exit 75).
func Acquire(ctx context.Context, ids []string, o Options) (*Lease, error) {
	if len(ids) == 0 {
		return &Lease{}, nil
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	if err := os.MkdirAll(o.Dir, 0o770); err != nil {
		return nil, refusal.Refusef("GPU lease directory: %v (kbgen node install's units create %s as the agents' RuntimeDirectory)", err, DefaultDir)
	}
	sorted := slices.Sorted(slices.Values(ids))
	w := &leaseWait{o: o, start: time.Now(), deadline: time.Now().Add(o.Wait)}
	var intents []*os.File
	defer func() { closeAll(intents) }()
	for _, id := range sorted {
		f, err := w.take(ctx, id, ".intent")
		if err != nil {
			return nil, err
		}
		intents = append(intents, f)
	}
	l := &Lease{}
	for _, id := range sorted {
		f, err := w.take(ctx, id, ".lock")
		if err != nil {
			l.Release()
			return nil, err
		}
		l.locks = append(l.locks, f)
		// What a waiter prints: who has the GPU, since when.
		_ = f.Truncate(0)
		_, _ = f.WriteAt([]byte(o.Holder+" since "+time.Now().UTC().Format(time.RFC3339)+"\n"), 0)
	}
	if w.waited {
		o.Logf("kbgen sandbox: GPU lease: %s after %s", strings.Join(sorted, ", "), time.Since(w.start).Round(time.Millisecond))
	}
	return l, nil
}

// Release lets the GPUs go. Safe on a nil or empty lease.
func (l *Lease) Release() {
	if l == nil {
		return
	}
	for _, f := range l.locks {
		_ = f.Truncate(0)
	}
	closeAll(l.locks)
	l.locks = nil
}

func closeAll(fs []*os.File) {
	for _, f := range fs {
		// Unlock first: close alone drops the flock only when no other
		// descriptor shares the open file, and a child this process forks
		// at that moment holds one until its exec closes it (O_CLOEXEC).
		// A parallel test saw the lease still held right after Release.
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		_ = f.Close()
	}
}

// leaseWait is one acquisition's shared deadline and reporting.
type leaseWait struct {
	o        Options
	start    time.Time
	deadline time.Time
	waited   bool
}

// take flocks Dir/id+suffix, polling (a blocking flock cannot be bounded
// or cancelled) until the deadline.
func (w *leaseWait) take(ctx context.Context, id, suffix string) (*os.File, error) {
	name, err := leaseFile(w.o.Dir, id, suffix)
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o660)
	if err != nil {
		return nil, refusal.Refusef("GPU lease: %v", err)
	}
	var lastReport time.Time
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			f.Close()
			return nil, refusal.Refusef("GPU lease %s: %v", name, err)
		}
		now := time.Now()
		if now.After(w.deadline) {
			f.Close()
			return nil, w.busy(id)
		}
		if now.Sub(lastReport) >= leaseReport {
			what := "in use"
			if suffix == ".intent" {
				what = "claimed by a job waiting for it"
			}
			w.o.Logf("kbgen sandbox: waiting for GPU %s (%s, %s so far): held by %s", id, what, now.Sub(w.start).Round(time.Second), w.holder(id))
			lastReport, w.waited = now, true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(leasePoll):
		}
	}
}

// busy is the refusal of a job whose wait for GPU id ran out.
func (w *leaseWait) busy(id string) *BusyError {
	holder := w.holder(id)
	err := refusal.Refusef("GPU %s is still held by %s after waiting %s (%s); another agent can take this job", id, holder, w.o.Wait, contract.EnvLeaseWait)
	return &BusyError{GPU: id, Holder: holder, err: err}
}

// holder is what the GPU's lock file says about its holder, made safe to
// print: one line of printable text, at most 200 bytes.
func (w *leaseWait) holder(id string) string {
	name, err := leaseFile(w.o.Dir, id, ".lock")
	if err != nil {
		return "an unknown job"
	}
	data, _ := readAtMost(name, 200)
	text := strings.Map(func(r rune) rune {
		if unicode.IsPrint(r) {
			return r
		}
		return -1
	}, strings.TrimSpace(string(data)))
	if text == "" {
		return "another job of this node"
	}
	return text
}

func readAtMost(name string, n int) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf := make([]byte, n)
	k, _ := f.Read(buf)
	return buf[:k], nil
}

// leaseFile is the file for GPU id: ids are UUIDs (GPU-…, MIG-…) or
// render node names (renderD128), never paths.
func leaseFile(dir, id, suffix string) (string, error) {
	if id == "" || strings.ContainsAny(id, "/\\\x00") || id == "." || id == ".." {
		return "", refusal.Refusef("GPU lease: %q cannot name a lock file", id)
	}
	return filepath.Join(dir, "gpu-"+id+suffix), nil
}

// Locked reports whether a flock on path is held by another open file
// description: a GPU's lock (or intent) taken by some job. A file that
// cannot be opened is not locked.
func Locked(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return true
	}
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return false
}
