package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/noise"
	"github.com/gpu-mode/kbgen/payload"
)

func readNoise(t *testing.T, path string) *noise.Record {
	t.Helper()
	rec, err := noise.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// TestRunWritesNoiseBesideResult: a leaderboard run records its benchmark
// and leaderboard runs in noise.json, uploads it with result.json and
// adds a line to the annotation; result.json stays Kernelbot's schema.
func TestRunWritesNoiseBesideResult(t *testing.T) {
	needPython3(t)
	dir := t.TempDir()
	logs := fakeAgent(t, "none")
	out := filepath.Join(dir, "out", "result.json")
	r := runKbgen(t, nil, "", "run", "--payload-file", exampleJobFile(t, dir, "vectoradd", "submission", payload.ModeLeaderboard),
		"--system", systemFile(t, dir), "--out", out)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	rec := readNoise(t, filepath.Join(dir, "out", contract.NoiseFile))
	if len(rec.Runs) != 2 || rec.Runs["benchmark"] == nil || rec.Runs["leaderboard"] == nil {
		t.Fatalf("noise runs = %v, want benchmark and leaderboard", rec.Runs)
	}
	if (rec.Verdict == noise.Clean) != (len(rec.Reasons) == 0) || rec.Runs["leaderboard"].Steal.Status != noise.OK {
		t.Errorf("verdict %s with reasons %v; steal %+v", rec.Verdict, rec.Reasons, rec.Runs["leaderboard"].Steal)
	}
	if rec.Retry {
		t.Error("retried without a retry policy")
	}
	if !strings.Contains(r.stderr, "kbgen run: wrote "+filepath.Join(dir, "out", contract.NoiseFile)+" (") {
		t.Errorf("stderr does not report noise.json:\n%s", r.stderr)
	}
	var raw map[string]any
	b, _ := os.ReadFile(out)
	if err := json.Unmarshal(b, &raw); err != nil || strings.Contains(string(b), "noise") || len(raw) != 4 {
		t.Errorf("result.json changed shape (%v): %s", err, b)
	}
	argv0, _ := os.ReadFile(filepath.Join(logs, "0.argv"))
	md, _ := os.ReadFile(filepath.Join(logs, "1.stdin"))
	if string(argv0) != "artifact\nupload\nresult.json;noise.json\n" || !strings.Contains(string(md), "**noise**: "+string(rec.Verdict)) {
		t.Errorf("upload %q annotation %q", argv0, md)
	}

	// A test-mode run times nothing: no record, and the stale one goes.
	r = runKbgen(t, nil, "", "run", "--payload-file", exampleJobFile(t, dir, "vectoradd", "submission", payload.ModeTest),
		"--system", systemFile(t, dir), "--out", out, "--no-upload")
	if _, err := os.Stat(filepath.Join(dir, "out", contract.NoiseFile)); r.code != 0 || !os.IsNotExist(err) {
		t.Errorf("test mode: exit %d, noise.json %v (want removed)", r.code, err)
	}

	// --publish uploads the noise record beside the result.
	if err := noise.Write(filepath.Join(dir, "out", contract.NoiseFile), rec); err != nil {
		t.Fatal(err)
	}
	logs = fakeAgent(t, "none")
	if r := runKbgen(t, nil, "", "run", "--publish", out); r.code != 0 {
		t.Fatalf("publish: exit %d: %s", r.code, r.stderr)
	}
	argv0, _ = os.ReadFile(filepath.Join(logs, "0.argv"))
	md, _ = os.ReadFile(filepath.Join(logs, "1.stdin"))
	if string(argv0) != "artifact\nupload\nresult.json;noise.json\n" || !strings.Contains(string(md), "**noise**: ") {
		t.Errorf("publish: upload %q annotation %q", argv0, md)
	}
}

// TestRunRetriesExternalNoiseOnce: a busy process allowed on the job's
// CPUs is external noise; under a retry policy a leaderboard run exits 75
// on its first attempt (result.json and noise.json written), and not on a
// retry, and a benchmark run never.
func TestRunRetriesExternalNoiseOnce(t *testing.T) {
	needPython3(t)
	busy := exec.Command("sh", "-c", "while :; do :; done")
	if err := busy.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = busy.Process.Kill(); _ = busy.Wait() })
	policy := map[string]string{contract.EnvNoisePolicy: "max_foreign_percent=0.01,max_steal_percent=100,retry=true"}
	for _, tc := range []struct {
		name    string
		mode    payload.Mode
		retries string
		code    int
		retry   bool
	}{
		{"first attempt", payload.ModeLeaderboard, "0", 75, true},
		{"a retry: the result stands", payload.ModeLeaderboard, "1", 0, false},
		{"benchmark mode is not ranked", payload.ModeBenchmark, "0", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			env := map[string]string{"BUILDKITE_RETRY_COUNT": tc.retries}
			for k, v := range policy {
				env[k] = v
			}
			out := filepath.Join(dir, "result.json")
			r := runKbgen(t, env, "", "run", "--payload-file", exampleJobFile(t, dir, "vectoradd", "submission", tc.mode),
				"--system", systemFile(t, dir), "--out", out, "--no-upload")
			if r.code != tc.code {
				t.Fatalf("exit %d, want %d: %s", r.code, tc.code, r.stderr)
			}
			if _, err := os.Stat(out); err != nil {
				t.Fatalf("no result.json: %v", err)
			}
			rec := readNoise(t, filepath.Join(dir, contract.NoiseFile))
			if !rec.External() || rec.Retry != tc.retry {
				t.Fatalf("noise: external %v retry %v, want external and retry %v; reasons %v", rec.External(), rec.Retry, tc.retry, rec.Reasons)
			}
			if tc.retry && !strings.Contains(r.stderr, "exit 75 so Buildkite runs the job again") {
				t.Errorf("stderr does not say why it exits 75:\n%s", r.stderr)
			}
		})
	}
}
