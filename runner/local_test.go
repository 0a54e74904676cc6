package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/jobsource"
	"github.com/gpu-mode/kbgen/payload"
)

// TestLocal: kbgen local's job, plan, evaluation and exit code. Serial:
// one Evaluate at a time per process.
func TestLocal(t *testing.T) {
	needPython(t)
	for _, tc := range []struct {
		name     string
		opts     LocalOptions
		code     int
		wantErr  string // in the error
		wantLog  string // in the log
		noResult bool
		toFile   bool
	}{
		{name: "an example passes", opts: LocalOptions{Job: jobsource.Source{Example: "identity", Mode: payload.ModeTest}},
			code: exitcode.OK, wantLog: "pipeline for queue"},
		{name: "a wrong submission fails", opts: LocalOptions{Job: jobsource.Source{Example: "identity", Submission: "wrong", Mode: payload.ModeTest}},
			code: exitcode.Failure},
		{name: "to a file, quiet", opts: LocalOptions{Job: jobsource.Source{Example: "identity", Mode: payload.ModeTest}, Quiet: true},
			code: exitcode.OK, toFile: true},
		{name: "two job sources", opts: LocalOptions{Job: jobsource.Source{Example: "identity", Task: "x"}},
			code: exitcode.Usage, wantErr: "", noResult: true},
		{name: "an unknown queue", opts: LocalOptions{Job: jobsource.Source{Example: "identity"}, Queue: "no-such-queue"},
			code: exitcode.Usage, wantErr: "no-such-queue", noResult: true},
		{name: "a bad job", opts: LocalOptions{Job: jobsource.Source{PayloadFile: "-"}, Stdin: strings.NewReader("%%%")},
			code: exitcode.BadJob, wantErr: "invalid job", noResult: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			var out, log bytes.Buffer
			o := tc.opts
			o.Stdout, o.Log, o.Environ = &out, &log, []string{"PATH=" + os.Getenv("PATH")}
			o.WorkDir, o.SystemFile = filepath.Join(dir, "work"), writeJSON(t, filepath.Join(dir, "system.json"), testSystem)
			if tc.toFile {
				o.Out = filepath.Join(dir, "result.json")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			res, err := Local(ctx, o)
			// The message is the contract: kbgen local prints it as the user's only clue.
			if got := exitcode.Of(err); got != tc.code || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("exit %d (%v), want %d and %q\n%s", got, err, tc.code, tc.wantErr, log.String())
			}
			if tc.noResult {
				if res != nil || out.Len() > 0 {
					t.Errorf("a result for a job that never ran: %+v %q", res, out.String())
				}
				return
			}
			written := out.Bytes()
			if tc.toFile {
				written = readFile(t, o.Out)
			}
			var back payload.FullResult
			if err := json.Unmarshal(written, &back); err != nil || back.Success != res.Success {
				t.Errorf("written result %q (%v), want the returned one", written, err)
			}
			if !strings.Contains(log.String(), tc.wantLog) || (o.Quiet && log.Len() > 0) {
				t.Errorf("log %q: want %q (nothing when quiet)", log.String(), tc.wantLog)
			}
		})
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
