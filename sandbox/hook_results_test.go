package sandbox

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/internal/testimage"
	"github.com/gpu-mode/kbgen/sandbox/dockerargv"
)

// hookPath is the gpu-docker plugin's command hook in this checkout.
var hookPath = filepath.Join("..", ".buildkite", "plugins", "gpu-docker", "hooks", "command")

// fakeSandbox is a kbgen whose `sandbox` writes a result into its
// --out-dir, records the dir, then does what $FAKE_END says: "exit" (0),
// or a signal name sent to the hook's shell (its parent).
const fakeSandbox = `#!/bin/sh
case "$1" in
sandbox)
  echo "$3" > "$FAKE_MARK"
  echo '{}' > "$3/result.json"
  case "$FAKE_END" in
  exit) exit 0 ;;
  *) kill -s "$FAKE_END" "$PPID"; sleep 1; exit 0 ;;
  esac ;;
esac
exit 0
`

// resultDirs lists base's .kbgen-results.* entries.
func resultDirs(t *testing.T, base string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(base, ".kbgen-results.*"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range m {
		m[i] = filepath.Base(m[i])
	}
	return m
}

// TestHookRemovesResultsDir: the hook's results directory (outside the
// checkout) is gone after the hook, however its shell ends short of
// SIGKILL; directories a SIGKILLed job of the same agent left are removed
// at the next job's start, those of another agent sharing the build path
// are not.
func TestHookRemovesResultsDir(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	for _, end := range []string{"exit", "HUP", "INT"} {
		t.Run(end, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			bin, base := filepath.Join(root, "bin"), filepath.Join(root, "builds")
			mustMkdir(t, bin)
			mustMkdir(t, base)
			if err := os.WriteFile(filepath.Join(bin, "kbgen"), []byte(fakeSandbox), 0o755); err != nil {
				t.Fatal(err)
			}
			// Left by a killed job of this agent (a directory with a
			// result, an empty one) and a neighbour's in-flight one.
			for _, d := range []string{".kbgen-results.gpu0.AAAAAA/sub", ".kbgen-results.gpu0.BBBBBB", ".kbgen-results.gpu1.CCCCCC"} {
				mustMkdir(t, filepath.Join(base, d))
			}
			mark := filepath.Join(root, "mark")
			cmd := exec.Command("bash", "-c", `. "$1"`, "hook", hookPath)
			cmd.Env = []string{"PATH=" + bin + ":/usr/bin:/bin", "BUILDKITE_BUILD_PATH=" + base, "BUILDKITE_AGENT_NAME=gpu0",
				"BUILDKITE_COMMAND=kbgen run", "FAKE_MARK=" + mark, "FAKE_END=" + end}
			out, err := cmd.CombinedOutput()
			t.Logf("hook: %v\n%s", err, out)
			used, rerr := os.ReadFile(mark)
			if rerr != nil {
				t.Fatalf("the fake sandbox did not run: %v", rerr)
			}
			if dir := strings.TrimSpace(string(used)); !strings.HasPrefix(filepath.Base(dir), ".kbgen-results.gpu0.") || filepath.Dir(dir) != base {
				t.Errorf("results dir %q, want %s/.kbgen-results.gpu0.*", dir, base)
			}
			if got, want := resultDirs(t, base), []string{".kbgen-results.gpu1.CCCCCC"}; !slices.Equal(got, want) {
				t.Errorf("left in the build path: %v, want only %v", got, want)
			}
			if end == "exit" && !strings.Contains(string(out), "removed .kbgen-results.gpu0.AAAAAA, left by a killed job") {
				t.Errorf("the stale removal is not in the job log:\n%s", out)
			}
		})
	}
}

// TestBootstrapKilledJobResultsRemovedByNext: through the real agent's
// bootstrap, a job SIGKILLed whole (no trap runs) leaves its results
// directory; the same agent's next job removes it.
func TestBootstrapKilledJobResultsRemovedByNext(t *testing.T) {
	image := testimage.Busybox(t)
	j := newAgentJob(t, image, smallConfig(), "sleep 300")
	base := j.env["BUILDKITE_BUILD_PATH"]
	name := dockerargv.ContainerName(j.env["BUILDKITE_JOB_ID"])
	t.Cleanup(func() { _ = exec.Command("docker", "rm", "-f", name).Run() })

	cmd := exec.Command(filepath.Join(strings.SplitN(j.env["PATH"], ":", 2)[0], "buildkite-agent"), "bootstrap")
	for k, v := range j.env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(90 * time.Second)
	for len(resultDirs(t, base)) == 0 {
		if time.Now().After(deadline) {
			killTree(cmd.Process.Pid)
			t.Fatal("the hook never made its results directory")
		}
		time.Sleep(100 * time.Millisecond)
	}
	killTree(cmd.Process.Pid)
	_ = cmd.Wait()
	left := resultDirs(t, base)
	if len(left) != 1 {
		t.Fatalf("after the SIGKILL the build path holds %v, want the killed job's results directory", left)
	}

	j.env["BUILDKITE_JOB_ID"] = strings.Replace(j.env["BUILDKITE_JOB_ID"], "0190a1b2", "0190a1b3", 1)
	j.env["BUILDKITE_COMMAND"] = "true"
	t.Cleanup(func() {
		_ = exec.Command("docker", "rm", "-f", dockerargv.ContainerName(j.env["BUILDKITE_JOB_ID"])).Run()
	})
	j.run(t)
	if got := resultDirs(t, base); len(got) != 0 {
		t.Errorf("after the next job the build path holds %v, want none", got)
	}
	if !strings.Contains(j.output, "removed "+left[0]+", left by a killed job") {
		t.Errorf("the next job did not say it removed %s:\n%s", left[0], tail(j.output, 20))
	}
}

// killTree SIGKILLs a process and every descendant, as an agent host's
// `kill -9` of a whole job would. The bootstrap starts each hook in a
// process group (and, under its pty, a session) of its own, so a kill of
// the bootstrap's group alone left the hook running: it died later of a
// broken pipe, ran its EXIT trap and removed the directory itself, racing
// the next job. One walk of the tree raced too (a loaded CI run saw the
// directory gone): /proc/<pid>/task/*/children misses a child being
// forked while SIGSTOP is still pending. So the tree is walked again,
// stopping every process it finds, until a walk finds no new one; then
// all are killed.
func killTree(pid int) {
	stopped := map[int]bool{}
	var walk func(int) bool
	walk = func(p int) bool {
		fresh := !stopped[p]
		if fresh {
			_ = syscall.Kill(p, syscall.SIGSTOP)
			stopped[p] = true
		}
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", p))
		for _, f := range tasks {
			b, _ := os.ReadFile(f)
			for _, c := range strings.Fields(string(b)) {
				if n, err := strconv.Atoi(c); err == nil && walk(n) {
					fresh = true
				}
			}
		}
		return fresh
	}
	for walk(pid) {
		time.Sleep(10 * time.Millisecond) // let pending stops land
	}
	for p := range stopped {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
}
