package pipelinegen

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/buildkite/go-pipeline"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/payload"
	"github.com/gpu-mode/kbgen/registry"
)

// TestFromBuild: the bootstrap step's choices from the build env — no job
// is a passing pipeline, no or an unknown queue and an unreadable file are
// the caller's mistake (exit 2), a bad job is the job's (65).
func TestFromBuild(t *testing.T) {
	t.Parallel()
	reg, err := registry.Load("")
	if err != nil {
		t.Fatal(err)
	}
	in, err := ExampleJob(payload.ModeTest)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"lang": "cobol"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		b     Build
		env   map[string]string
		noJob bool
		usage bool
		kind  func(error) bool // which failure; nil: accepted
		text  string           // where the message is the contract: it tells the caller what to pass
		runID string
	}{
		{name: "job and queue from the env", env: map[string]string{contract.EnvPayload: in.Encoded, contract.EnvQueue: "h100", contract.EnvRunID: "r7"}, runID: "r7"},
		{name: "--queue beats the env", b: Build{Queue: "nvidia-h100"}, env: map[string]string{contract.EnvPayload: in.Encoded, contract.EnvQueue: "nowhere"}},
		{name: "no job: a pipeline that passes", env: map[string]string{contract.EnvQueue: "h100"}, noJob: true},
		{name: "no job in a named file is an error", b: Build{PayloadFile: filepath.Join(dir, "none")}, usage: true, kind: isErr(fs.ErrNotExist)},
		{name: "no queue", env: map[string]string{contract.EnvPayload: in.Encoded}, usage: true, kind: isA[*NoQueueError], text: "no queue: pass --queue or set KERNELBOT_QUEUE (known: nvidia-h100"},
		{name: "unknown queue", b: Build{Queue: "h200"}, env: map[string]string{contract.EnvPayload: in.Encoded}, usage: true, kind: isUnknownQueue("h200")},
		{name: "invalid job", b: Build{PayloadFile: bad, Queue: "h100"}, kind: func(err error) bool { return isFieldError(err, "lang") }},
		{name: "bad priority", env: map[string]string{contract.EnvPayload: in.Encoded, contract.EnvQueue: "h100", contract.EnvPriority: "high"}, kind: func(err error) bool { return isFieldError(err, contract.EnvPriority) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.b.Lookup = contract.MapLookup(tc.env)
			p, noJob, err := FromBuild(reg, tc.b, Options{})
			if (err == nil) != (tc.kind == nil) || (err != nil && (!tc.kind(err) || !strings.Contains(err.Error(), tc.text))) {
				t.Fatalf("error %v (%T): not the failure wanted (saying %q)", err, err, tc.text)
			}
			if exitcode.IsUsage(err) != tc.usage || (err != nil && !tc.usage && !payload.IsJobError(err)) {
				t.Fatalf("IsUsage(%v) = %v, job error %v; want usage %v", err, exitcode.IsUsage(err), payload.IsJobError(err), tc.usage)
			}
			if err != nil {
				return
			}
			if noJob != tc.noJob || len(p.Steps) != 1 {
				t.Fatalf("noJob %v, %d steps", noJob, len(p.Steps))
			}
			_, isCommand := p.Steps[0].(*pipeline.CommandStep)
			if isCommand == tc.noJob {
				t.Fatalf("step %T for noJob %v", p.Steps[0], tc.noJob)
			}
			if tc.runID != "" {
				if cs := p.Steps[0].(*pipeline.CommandStep); cs.Env[contract.EnvRunID] != tc.runID {
					t.Errorf("run id %q, want %q", cs.Env[contract.EnvRunID], tc.runID)
				}
			}
		})
	}
}

func isErr(target error) func(error) bool {
	return func(err error) bool { return errors.Is(err, target) }
}

func isA[T error](err error) bool { return errors.As(err, new(T)) }

func isUnknownQueue(queue string) func(error) bool {
	return func(err error) bool {
		uq, ok := errors.AsType[*registry.UnknownQueueError](err)
		return ok && uq.Queue == queue
	}
}
