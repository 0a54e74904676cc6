package bkagent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestArtifactUploadStopsAtTheFinalStates: the stand-in plays the agent's
// uploader with its output from testdata/upload and then sleeps as
// v3.50–v3.52 do. Only a clean "(N/N)" states line ends the call before the
// process does (and the process is gone when it returns); a partial batch,
// an error before the line, or a newer agent's output is waited out, and
// the error's summary leaves the DEBUG lines out, an HTTP dump's lines
// that continue one included.
func TestArtifactUploadStopsAtTheFinalStates(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, output string
		sleepTenths  int
		exit         int
		wantKilled   bool
		wantErr      string
	}{
		{name: "final states sent, then the uploader's sleep", output: "v3.52-done.txt", sleepTenths: 300, wantKilled: true},
		{name: "one batch of two", output: "v3.52-partial.txt", sleepTenths: 3},
		{name: "a file failed before its state was sent", output: "v3.52-file-failed.txt", sleepTenths: 3, exit: 1,
			wantErr: `buildkite-agent artifact upload failed (exit 1): 2026-11-24 16:06:08 INFO   Found 1 files that match "result.json" command=artifact upload | 2026-11-24 16:06:08 ERROR  Error uploading artifact "result.json": 403 Forbidden command=artifact upload | 2026-11-24 16:06:10 FATAL  Failed to upload artifacts: errors uploading artifacts: [403 Forbidden] command=artifact upload`},
		{name: "the states failed", output: "v3.52-states-failed.txt", sleepTenths: 3, exit: 1, wantErr: "FATAL  Failed to upload artifacts: errors uploading artifacts: [500]"},
		{name: "a newer agent's output", output: "newer-agent.txt", sleepTenths: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			logDir := t.TempDir()
			output, _ := filepath.Abs(filepath.Join("testdata", "upload", tc.output))
			agent, err := Find("", standIn(t, "BK_LOG_DIR="+logDir, "BK_UPLOAD_OUTPUT="+output,
				"BK_UPLOAD_SLEEP="+strconv.Itoa(tc.sleepTenths), "BK_UPLOAD_EXIT="+strconv.Itoa(tc.exit)))
			if err != nil {
				t.Fatal(err)
			}
			err = agent.ArtifactUpload(context.Background(), t.TempDir(), []string{"result.json"})
			var ce *CallError
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("err %v, want none", err)
			case tc.wantErr != "" && (!errors.As(err, &ce) || ce.Exit != tc.exit):
				t.Fatalf("err %v, want the upload's exit %d", err, tc.exit)
			// The summary is the contract: the job log shows the agent's own words, DEBUG lines left out.
			case tc.wantErr != "" && !strings.Contains(err.Error(), tc.wantErr):
				t.Fatalf("err %v, want one containing %q", err, tc.wantErr)
			case err != nil && (strings.Contains(ce.Output, "DEBUG") || strings.Contains(ce.Output, "planted")):
				t.Errorf("the error carries DEBUG lines or what continues them: %v", err)
			}
			_, statErr := os.Stat(filepath.Join(logDir, "upload.exited"))
			if exited := statErr == nil; exited == tc.wantKilled {
				t.Errorf("uploader ran to its end: %v, want %v", exited, !tc.wantKilled)
			}
			pid, _ := os.ReadFile(filepath.Join(logDir, "upload.pid"))
			n, err := strconv.Atoi(strings.TrimSpace(string(pid)))
			if err != nil {
				t.Fatalf("the stand-in wrote no pid: %q", pid)
			}
			if err := syscall.Kill(n, 0); !errors.Is(err, syscall.ESRCH) {
				t.Errorf("the uploader (pid %d) is still there after the call: %v", n, err)
			}
		})
	}
}
