package runner

import (
	"context"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/payload"
)

// The built-in identity example ships the cheats a leaderboard sees. Each
// must fail here (Kernelbot's runner passes some of them).
func TestCheatSubmissionsFail(t *testing.T) {
	needPython(t)
	for _, cheat := range []string{"cheat-pipe", "cheat-exit", "cheat-input", "cheat-files", "cheat-daemon", "cheat-replies"} {
		t.Run(cheat, func(t *testing.T) {
			start := time.Now()
			res, err := evaluate(t, example(t, "identity", cheat, payload.ModeLeaderboard))
			if err != nil {
				t.Fatal(err)
			}
			r := res.Runs["test"].Run
			if r == nil || r.Passed {
				t.Fatalf("cheat passed: %+v", r)
			}
			if _, ok := res.Runs["benchmark"]; ok {
				t.Error("a failed test must stop the ranked run")
			}
			if strings.Contains(r.Stderr+r.Stdout, "planted module ran") {
				t.Error("a module planted during the warm-up ran in the harness")
			}
			// cheat-daemon's helper lives 60 s; the runner must not wait.
			if took := time.Since(start); took > 30*time.Second {
				t.Errorf("took %s", took)
			}
		})
	}
}

// TestHarnessTimesFromOutside: a correct 50 ms kernel that replaces
// every clock in its process (a 1 ns mean when a harness timed it there,
// as the built-in one did: issue 20) is timed by the built-in harness
// from its own process, so every mean is at least 50 ms.
func TestHarnessTimesFromOutside(t *testing.T) {
	needPython(t)
	for _, mode := range []payload.Mode{payload.ModeBenchmark, payload.ModeLeaderboard} {
		t.Run(string(mode), func(t *testing.T) {
			res, err := evaluate(t, example(t, "identity", "cheat-timer", mode))
			if err != nil || !res.AllPassed() {
				t.Fatalf("a correct kernel failed: %v %+v", err, res.Runs)
			}
			for key, run := range res.Runs {
				for k, v := range run.Run.Result {
					if !strings.HasSuffix(k, ".mean") && !strings.HasSuffix(k, ".best") {
						continue
					}
					ns, err := strconv.ParseFloat(v, 64)
					if err != nil || ns < 50e6 {
						t.Errorf("%s %s = %s ns: the submission's clock was believed", key, k, v)
					}
				}
			}
		})
	}
}

func TestHonestIdentityPasses(t *testing.T) {
	needPython(t)
	res, err := evaluate(t, example(t, "identity", "submission", payload.ModeTest))
	if err != nil || !res.AllPassed() {
		t.Fatalf("%v %+v", err, res.Runs["test"].Run)
	}
}

// A detached grandchild that inherited the verdict pipe writes a verdict
// after the harness has exited. Kernelbot's runner would wait for it (it
// also holds stdout) and then believe it; kbgen kills it and ignores it.
func TestLateVerdictFromDetachedProcessIgnored(t *testing.T) {
	needPython(t)
	evalPy := `import os, sys, time
fd = int(os.environ['POPCORN_FD'])
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(3)
        os.write(fd, b'check: pass\n')
        time.sleep(30)
    os._exit(0)
os.wait()
sys.exit(0)
`
	start := time.Now()
	res, err := evaluate(t, pyJob(payload.ModeTest, evalPy, ""))
	if err != nil {
		t.Fatal(err)
	}
	r := res.Runs["test"].Run
	if r.Passed || r.Result["check"] != "" {
		t.Errorf("late verdict accepted: %v", r.Result)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("runner waited for the detached process: %s", took)
	}
}

// A verdict written by a helper while the harness still runs counts (the
// harness may delegate), but one that contradicts the harness fails.
func TestHelperVerdictDuringRun(t *testing.T) {
	needPython(t)
	evalPy := `import os, sys, subprocess
fd = os.environ['POPCORN_FD']
subprocess.run([sys.executable, '-c', 'import os; os.write(int(os.environ["POPCORN_FD"]), b"check: pass\\n")'], pass_fds=[int(fd)])
sys.exit(0)
`
	res, err := evaluate(t, pyJob(payload.ModeTest, evalPy, ""))
	if err != nil {
		t.Fatal(err)
	}
	if r := res.Runs["test"].Run; !r.Passed {
		t.Errorf("helper's verdict lost: %+v", r)
	}
}

// A harness file changed during the run fails the run, even when the change
// is undone before the run ends: a submission imported before the reference
// can rewrite it, let the harness import the rewritten version, and restore
// the original, which a content check alone would miss.
func TestHarnessFilesChangedDuringRunFail(t *testing.T) {
	needPython(t)
	for _, tt := range []struct {
		name, evalPy, want string
	}{
		{"changed", `import os, sys
os.chmod('reference.py', 0o644)
open('reference.py', 'a').write('\n# changed\n')
f = os.fdopen(int(os.environ['POPCORN_FD']), 'w')
f.write('check: pass\n')
`, "reference.py was modified"},
		{"changed and restored", `import os
original = open('reference.py').read()
os.chmod('reference.py', 0o644)
open('reference.py', 'w').write('check = lambda *a: True\n')
open('reference.py', 'w').write(original)
os.chmod('reference.py', 0o444)
os.write(int(os.environ['POPCORN_FD']), b'check: pass\n')
`, "reference.py was modified and restored"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := pyJob(payload.ModeTest, tt.evalPy, "")
			cfg.Sources["reference.py"] = "REF = 1\n"
			res, err := evaluate(t, cfg)
			if err != nil {
				t.Fatal(err)
			}
			r := res.Runs["test"].Run
			if r.Passed || !strings.Contains(r.Stderr, tt.want) {
				t.Errorf("tampering not caught: passed=%v stderr=%q", r.Passed, r.Stderr)
			}
		})
	}
}

// The warm-up may rewrite every file it sees; the harness must still run
// from the job's own files, in a directory holding nothing else.
func TestWarmupCannotTouchTheHarness(t *testing.T) {
	needPython(t)
	evalPy := `import os, sys, hashlib
names = sorted(os.listdir('.'))
f = os.fdopen(int(os.environ['POPCORN_FD']), 'w')
f.write('files: ' + ','.join(names) + '\n')
f.write('ref: ' + open('reference.py').read().strip() + '\n')
f.write('check: pass\n')
`
	sub := `import os, glob
if __name__ == '__main__':
    for name in glob.glob('*.py'):
        os.chmod(name, 0o644)
        open(name, 'w').write('# rewritten by the warm-up\n')
    open('json.py', 'w').write('raise SystemExit(9)\n')
    # Plant files where later runs might look, too.
    for d in ('..', '../..'):
        try:
            open(os.path.join(d, 'planted.py'), 'w').write('x')
        except OSError:
            pass
`
	cfg := pyJob(payload.ModeLeaderboard, evalPy, sub)
	cfg.Sources["reference.py"] = "original reference\n"
	res, err := evaluate(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"test", "benchmark", "leaderboard"} {
		r := res.Runs[k].Run
		if r == nil {
			t.Fatalf("%s did not run", k)
		}
		if r.Result["files"] != "eval.py,reference.py,submission.py" || r.Result["ref"] != "# original reference" && r.Result["ref"] != "original reference" || !r.Passed {
			t.Errorf("%s: harness saw %v (stderr %s)", k, r.Result, r.Stderr)
		}
	}
}

func TestSubmissionEnvironmentIsAllowListed(t *testing.T) {
	needPython(t)
	secrets := []string{
		"BUILDKITE_AGENT_ACCESS_TOKEN=bkua_secret_1",
		"BUILDKITE_API_TOKEN=bkapi_secret_2",
		"KERNELBOT_PAYLOAD=payload_secret_3",
		"KERNELBOT_PAYLOAD_0=payload_secret_4",
		"AWS_SECRET_ACCESS_KEY=aws_secret_5",
		"PYTHON_TOKEN=py_secret_6",
		"RANDOM_VENDOR_VAR=vendor_secret_7",
		"POPCORN_FD=99",
	}
	environ := append(os.Environ(), secrets...)
	environ = append(environ, "CUDA_VISIBLE_DEVICES=0", "TORCH_CUDA_ARCH_LIST=9.0")
	res, err := evaluate(t, example(t, "identity", "cheat-env", payload.ModeTest), func(o *EvalOptions) { o.Environ = environ })
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(res)
	for _, s := range secrets {
		if _, v, _ := strings.Cut(s, "="); v != "99" && strings.Contains(string(b), v) {
			t.Errorf("secret %s reached the result", s)
		}
	}
	r := res.Runs["test"].Run
	if !strings.Contains(r.Stderr, "leaked:\n") || !r.Passed {
		t.Errorf("the submission saw secrets or failed: %s", r.Stderr)
	}
	env := SubmissionEnv(environ, map[string]string{"POPCORN_FD": "3"})
	joined := "\n" + strings.Join(env, "\n") + "\n"
	for _, want := range []string{"\nCUDA_VISIBLE_DEVICES=0\n", "\nTORCH_CUDA_ARCH_LIST=9.0\n", "\nPOPCORN_FD=3\n"} {
		if !strings.Contains(joined, want) {
			t.Errorf("%q missing from the submission's environment", strings.TrimSpace(want))
		}
	}
}

func TestAllowedEnv(t *testing.T) {
	for k, want := range map[string]bool{
		"PATH": true, "HOME": true, "LANG": true, "LC_ALL": true, "PYTHONPATH": true,
		"CUDA_VISIBLE_DEVICES": true, "HIP_VISIBLE_DEVICES": true, "ROCR_VISIBLE_DEVICES": true,
		"NVIDIA_VISIBLE_DEVICES": true, "TORCH_HOME": true, "TRITON_CACHE_DIR": true, "POPCORN_DEBUG": true,
		"KERNELBOT_PAYLOAD": false, "KERNELBOT_PAYLOAD_3": false, "KERNELBOT_PAYLOAD_SHA256": false,
		"KERNELBOT_RUN_ID": false, "BUILDKITE_AGENT_ACCESS_TOKEN": false, "BUILDKITE_JOB_ID": false,
		"HF_TOKEN": false, "TORCH_HUB_TOKEN": false, "CUDA_SECRET": false, "AWS_ACCESS_KEY_ID": false,
		"POPCORN_FD": false, "POPCORN_SEED": false, "SSH_AUTH_SOCK": false, "": false,
	} {
		if AllowedEnv(k) != want {
			t.Errorf("AllowedEnv(%q) = %v, want %v", k, !want, want)
		}
	}
}

// Bounded stand-ins for resource attacks: the runner's part is to leave
// nothing running and nothing on disk; the sandbox's limits (pids,
// memory, tmpfs size, network none) are tested on its argv.
func TestForkerAndDiskFillerLeaveNothing(t *testing.T) {
	needPython(t)
	evalPy := `import os, sys, time
# A bounded fork bomb: 40 processes that each fork again and sleep.
for i in range(20):
    if os.fork() == 0:
        os.fork()
        time.sleep(60)
        os._exit(0)
# A bounded disk filler: 20 MiB in the run directory and beside it.
for name in ('fill.bin', '../fill.bin'):
    with open(name, 'wb') as f:
        f.write(b'\0' * (20 << 20))
os.write(int(os.environ['POPCORN_FD']), b'check: pass\n')
`
	dir := t.TempDir()
	start := time.Now()
	res, err := evaluate(t, pyJob(payload.ModeTest, evalPy, ""), func(o *EvalOptions) { o.WorkDir = dir })
	if err != nil {
		t.Fatal(err)
	}
	if !res.Runs["test"].Run.Passed {
		t.Errorf("run failed: %+v", res.Runs["test"].Run)
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("took %s", took)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("work dir not cleaned: %v", ents)
	}
}

func TestStrayChildrenFastPath(t *testing.T) {
	stray, ok := strayChildren()
	if !ok {
		t.Skip("kernel without /proc/<pid>/task/<tid>/children: sweeps always scan /proc")
	}
	if len(stray) != 0 {
		t.Fatalf("stray children before any run: %v", stray)
	}
}

// TestOrphanZombiesReapedDuringRun: an orphan that exits while the
// harness still runs is reaped then, not at the harness's end. In the
// sandbox `kbgen run --sealed` is PID 1 and nobody else would wait for it.
func TestOrphanZombiesReapedDuringRun(t *testing.T) {
	// The orphan is a "sleep" re-parented to this test process (the
	// subreaper); the script counts such zombies a second after it exited.
	script := `( sleep 0.2 & )
sleep 1.5
z=0
for s in /proc/[0-9]*/stat; do
  l=$(cat "$s" 2>/dev/null) || continue
  case "$l" in *"(sleep) Z $PPID "*) z=$((z+1)) ;; esac
done
echo "zombies=$z"
`
	out, err := program{Args: []string{"sh", "-c", script}, Env: os.Environ(), Timeout: 30 * time.Second}.run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.Stdout, "zombies=0") {
		t.Errorf("an exited orphan was left a zombie during the run: %q (stderr %q)", out.Stdout, out.Stderr)
	}
}
