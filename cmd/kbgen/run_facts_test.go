package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/gpu-mode/kbgen/fleet/runfacts"
)

// TestRunPublishSetsFacts: the hook's kbgen run --publish sets the
// attempt's run facts beside the result, under the attempt's key, with the
// sandbox's exit status the hook passes and the noise record's verdict.
func TestRunPublishSetsFacts(t *testing.T) {
	dir, bin, logs := t.TempDir(), t.TempDir(), t.TempDir()
	// A stand-in agent that keeps each meta-data value under its key (the
	// result's and the facts' are set at once).
	script := "#!/bin/sh\nfor a; do last=$a; done\n[ \"$1\" = meta-data ] && cat > \"" + logs + "/$last\"\nexit 0\n"
	if err := os.WriteFile(filepath.Join(bin, "buildkite-agent"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	out := filepath.Join(dir, "result.json")
	noise := `{"version": 1, "verdict": "noisy", "reasons": [{"run": "benchmark", "source": "steal", "external": true, "message": "steal 9 %"}], "retry": false, "attempt": 2, "policy": {}, "runs": {}, "cost_ms": 0}`
	for p, c := range map[string]string{out: `{"success": false, "error": "GPU fault", "system": {}, "runs": {}}`, filepath.Join(dir, "noise.json"): noise} {
		if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	env := map[string]string{"BUILDKITE_JOB_ID": "0190-job-9", "BUILDKITE_AGENT_NAME": "node3-gpu1", "KERNELBOT_QUEUE": "nvidia-h100",
		"BUILDKITE_RETRY_COUNT": "1", "KBGEN_SANDBOX_EXIT": "75", "KERNELBOT_GPU_UUID": "GPU-1234"}
	if r := runKbgen(t, env, "", "run", "--publish", out); r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	v, err := os.ReadFile(filepath.Join(logs, runfacts.Key(2)))
	if err != nil {
		t.Fatalf("no facts under %s: %v", runfacts.Key(2), err)
	}
	f, job, err := runfacts.Decode(string(v))
	if err != nil || job != "0190-job-9" {
		t.Fatalf("facts %q: job %q, %v", v, job, err)
	}
	if f.Agent != "node3-gpu1" || f.Queue != "nvidia-h100" || f.Attempt != 2 || f.Exit == nil || *f.Exit != 75 || f.Noise != "noisy" ||
		len(f.GPUUUIDs) != 1 || f.GPUUUIDs[0] != "GPU-1234" || len(f.NoiseReasons) != 1 {
		t.Errorf("facts %+v", f)
	}
}
