package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/jobsource"
	"github.com/gpu-mode/kbgen/payload"
	"github.com/gpu-mode/kbgen/signing"
)

func isPayloadKind(k payload.ErrorKind) func(error) bool {
	return func(err error) bool {
		var pe *payload.Error
		return errors.As(err, &pe) && pe.Kind == k
	}
}

func isMisrouted(step, agent string) func(error) bool {
	return func(err error) bool {
		var me *signing.MisroutedError
		return errors.As(err, &me) && me.StepQueue == step && me.AgentQueue == agent
	}
}

func isMachineFault(err error) bool { return FaultOf(err) == FaultMachine }
func isNotExist(err error) bool     { return errors.Is(err, fs.ErrNotExist) }

// TestRunExitCodes: each way a run can end maps to one exit code, and
// result.json is written in every case but unsound options (where no run
// began and nothing says where it would have failed).
func TestRunExitCodes(t *testing.T) {
	needPython(t)
	for _, tc := range []struct {
		name    string
		job     string // the --payload-file text; "" reads the env
		env     []string
		opts    func(o *RunOptions)
		ctx     func() context.Context
		code    int
		wantErr string           // in the returned error and, with a result, in its error
		is      func(error) bool // the kind of failure, where it has one
		success bool
		noFile  bool // options unsound: no result.json
	}{
		{name: "evaluated", job: "ok", code: exitcode.OK, success: true},
		{name: "not base64", job: "%%%%", code: exitcode.BadJob, wantErr: "payload is not standard base64", is: isPayloadKind(payload.KindNotBase64)},
		{name: "no job in the env", code: exitcode.BadJob, wantErr: "no KERNELBOT_PAYLOAD", is: isPayloadKind(payload.KindNoPayload)},
		{name: "payload from the env", env: []string{contract.EnvPayload + "=" + jobPayload(t)}, code: exitcode.OK, success: true},
		{name: "re-routed step", job: "ok", env: []string{"BUILDKITE_JOB_ID=j1", "KERNELBOT_QUEUE=nvidia-h100", "BUILDKITE_AGENT_META_DATA_QUEUE=amd-mi300"},
			code: exitcode.BadJob, wantErr: "refusing a re-routed step", is: isMisrouted("nvidia-h100", "amd-mi300")},
		{name: "no GPU, required by flag", job: "ok", opts: func(o *RunOptions) { o.RequireGPU = true }, code: exitcode.TempFail, wantErr: "no GPU visible", is: isMachineFault},
		{name: "no GPU, required by env", job: "ok", env: []string{contract.EnvRequireGPU + "=1"}, code: exitcode.TempFail, wantErr: "no GPU visible", is: isMachineFault},
		{name: "cancelled", job: "ok", ctx: func() context.Context {
			ctx, cancel := context.WithCancelCause(context.Background())
			cancel(errors.New("received terminated"))
			return ctx
		}, code: exitcode.Canceled, wantErr: "received terminated"},
		{name: "runner failure", job: "ok", opts: func(o *RunOptions) { o.WorkDir = o.SystemFile }, code: exitcode.Failure, wantErr: "creating work directory"},
		{name: "unreadable job file", job: "ok", opts: func(o *RunOptions) { o.PayloadFile += ".missing" }, code: exitcode.Usage, wantErr: "reading job", is: isNotExist},
		{name: "unreadable --system", job: "ok", opts: func(o *RunOptions) { o.SystemFile += ".missing" }, code: exitcode.Usage, wantErr: "reading --system", is: isNotExist, noFile: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			var log bytes.Buffer
			opts := RunOptions{
				Out:        filepath.Join(dir, "out", contract.ResultFile),
				WorkDir:    filepath.Join(dir, "work"),
				SystemFile: writeJSON(t, filepath.Join(dir, "system.json"), testSystem),
				NoUpload:   true,
				Environ:    append([]string{"PATH=" + os.Getenv("PATH")}, tc.env...),
				Log:        &log,
			}
			switch tc.job {
			case "":
			case "ok":
				opts.PayloadFile = writeJSON(t, filepath.Join(dir, "job.json"), example(t, "identity", "submission", payload.ModeTest))
			default:
				opts.PayloadFile = filepath.Join(dir, "job.txt")
				if err := os.WriteFile(opts.PayloadFile, []byte(tc.job), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if tc.opts != nil {
				tc.opts(&opts)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if tc.ctx != nil {
				ctx = tc.ctx()
			}
			out, err := Run(ctx, opts)
			if got := exitcode.Of(err); got != tc.code {
				t.Fatalf("code %d (error %v), want %d\n%s", got, err, tc.code, log.String())
			}
			if tc.is != nil && !tc.is(err) {
				t.Fatalf("error %v (%T), not the kind of failure %q is", err, err, tc.name)
			}
			// The message is the contract: result.json's error carries it to the submitter.
			if (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			}
			if tc.noFile {
				if out.Result != nil {
					t.Errorf("a result %+v for unsound options", out.Result)
				}
				return
			}
			res := readResult(t, opts.Out)
			if res.Success != tc.success || !strings.Contains(res.Error, tc.wantErr) || out.Result == nil || out.Result.Success != res.Success {
				t.Errorf("result.json success %v error %q, want success %v and %q", res.Success, res.Error, tc.success, tc.wantErr)
			}
			if res.System.CPU != testSystem.CPU {
				t.Errorf("result.json system %+v, want the --system one", res.System)
			}
			if want := "kbgen run: wrote " + opts.Out + " ("; !strings.Contains(log.String(), want) {
				t.Errorf("log lacks %q:\n%s", want, log.String())
			}
		})
	}
}

// TestExitCode: the one mapping from a run's failure to the exit-code
// table: the error Run returns carries its code (exitcode.Of).
func TestExitCode(t *testing.T) {
	_, jobErr := payload.ParseInput([]byte("%%%%"))
	_, usageErr := jobsource.FromBuild(filepath.Join(t.TempDir(), "none"), nil, nil)
	for _, tc := range []struct {
		err  error
		code int
	}{
		{nil, exitcode.OK},
		{usageErr, exitcode.Usage},
		{usageFault("reading --system: %w", os.ErrNotExist), exitcode.Usage},
		{jobErr, exitcode.BadJob},
		{fmt.Errorf("wrapped: %w", jobErr), exitcode.BadJob},
		{&Error{Fault: FaultJob, Err: errors.New("refusing a re-routed step")}, exitcode.BadJob},
		{machineFault("no GPU visible"), exitcode.TempFail},
		{&os.PathError{Op: "write", Path: "result.json", Err: syscall.ENOSPC}, exitcode.TempFail},
		{&Error{Fault: FaultCanceled, Err: errors.New("cancelled")}, exitcode.Canceled},
		{&Error{Fault: FaultSubmission, Err: errors.New("the job filled its own disk")}, exitcode.Failure},
		{errors.New("a bug"), exitcode.Failure},
	} {
		if got := exitcode.Of(withFault(tc.err)); got != tc.code {
			t.Errorf("exitcode.Of(withFault(%v)) = %d, want %d", tc.err, got, tc.code)
		}
	}
}

// TestRunRemovesStaleNoise: a run that times nothing leaves no noise.json
// from an earlier run beside its result.
func TestRunRemovesStaleNoise(t *testing.T) {
	needPython(t)
	dir := t.TempDir()
	stale := filepath.Join(dir, contract.NoiseFile)
	if err := os.WriteFile(stale, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := Run(context.Background(), RunOptions{
		PayloadFile: writeJSON(t, filepath.Join(dir, "job.json"), example(t, "identity", "submission", payload.ModeTest)),
		Out:         filepath.Join(dir, contract.ResultFile),
		SystemFile:  writeJSON(t, filepath.Join(dir, "system.json"), testSystem),
		NoUpload:    true,
		Environ:     []string{"PATH=" + os.Getenv("PATH")},
	})
	if err != nil || out.Noise != nil {
		t.Fatalf("noise %v: %v", out.Noise, err)
	}
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale noise.json still there: %v", err)
	}
}

func writeJSON(t *testing.T, path string, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func readResult(t *testing.T, path string) payload.FullResult {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("no result.json: %v", err)
	}
	var res payload.FullResult
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatalf("result.json: %v\n%s", err, b)
	}
	return res
}

// jobPayload is the identity example's test job as Kernelbot encodes it.
func jobPayload(t *testing.T) string {
	t.Helper()
	b, err := json.Marshal(example(t, "identity", "submission", payload.ModeTest))
	if err != nil {
		t.Fatal(err)
	}
	in, err := payload.ParseInput(b)
	if err != nil {
		t.Fatal(err)
	}
	return in.Encoded
}
