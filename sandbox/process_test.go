package sandbox

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/kbgenbin"
	"github.com/gpu-mode/kbgen/internal/syncbuf"
	"github.com/gpu-mode/kbgen/sandbox/dockerargv"
	"github.com/gpu-mode/kbgen/sandbox/dockerargv/dockerargvtest"
	"github.com/gpu-mode/kbgen/sandbox/process"
	"github.com/gpu-mode/kbgen/sandbox/refusal"
	"github.com/gpu-mode/kbgen/steps"
)

// processUID is the step's uid in these tests: not 1000, because the
// launcher kills every process of the step's uid it can see after the
// step, and this machine's /proc shows other tests' containers running
// as 1000.
func processUID(t *testing.T) int {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the process launcher starts the step as another uid, which takes root (CAP_SETUID): run the tests as root to attack it")
	}
	uid := 61000 + os.Getpid()%1000
	if left := process.Processes("/proc", uid); len(left) > 0 {
		t.Skipf("uid %d already has processes %v on this machine", uid, left)
	}
	return uid
}

// reachable lets any uid traverse dir and each directory above it up to
// the temp dir (the test's temp dirs are 0700, root's).
func reachable(t *testing.T, dir string) {
	t.Helper()
	for p := dir; strings.HasPrefix(p, os.TempDir()+"/"); p = filepath.Dir(p) {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// processPod is a pod's layout on this machine: the sandbox's binary,
// a python3 that is sh, the emptyDir work dir, an agent-stack-k8s
// workspace with the agent binary and the coordination socket.
type processPod struct {
	root, bin, work, workspace, results, facts string
	uid                                        int
}

func newProcessPod(t *testing.T) processPod {
	t.Helper()
	root := t.TempDir()
	reachable(t, root)
	p := processPod{root: root, uid: processUID(t), bin: filepath.Join(root, "bin"), work: filepath.Join(root, "work"),
		workspace: filepath.Join(root, "workspace"), facts: filepath.Join(root, "facts"), results: filepath.Join(root, "results")}
	// emptyDir volumes are 0777, the workspace too; all of them root's.
	for d, mode := range map[string]os.FileMode{p.bin: 0o755, p.work: 0o777, p.workspace: 0o777, p.facts: 0o777} {
		if err := os.Mkdir(d, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, mode); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(kbgenbin.Path(t))
	if err != nil {
		t.Fatal(err)
	}
	writeExec(t, filepath.Join(p.bin, "kbgen"), b)
	writeExec(t, filepath.Join(p.bin, "python3"), []byte("#!/bin/sh\nexec /bin/sh \"$@\"\n"))
	touch(t, p.workspace, "buildkite-agent", "#!/bin/sh\necho the real agent\n")
	// Root's file in the 0777 work dir, as the agent keeps files in /tmp.
	touch(t, p.work, "root-file", "root's\n")
	sock, err := net.Listen("unix", filepath.Join(p.workspace, "buildkite.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sock.Close() })
	if err := os.Chmod(filepath.Join(p.workspace, "buildkite.sock"), 0o777); err != nil {
		t.Fatal(err)
	}
	return p
}

func writeExec(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

// processResult is one `kbgen sandbox --launcher process -- kbgen run`.
type processResult struct {
	code  int
	log   string
	facts map[string]string
	res   string // the published result.json
	left  []int  // processes of the step's uid after the sandbox ended
}

// run runs the real CLI as the pod's command would, with the agent's
// token (a planted one) in the sandbox's own environment.
// With cancel, the sandbox gets SIGTERM (the agent's cancel) once the
// submission has written "started" to its facts.
func (p processPod) run(t *testing.T, submission string, cancel bool) processResult {
	t.Helper()
	enc := encodedPyJob(t, submission, "exit 0\n")
	ctx, stop := context.WithTimeout(context.Background(), 2*time.Minute)
	defer stop()
	user := strconv.Itoa(p.uid) + ":" + strconv.Itoa(p.uid)
	cmd := exec.CommandContext(ctx, filepath.Join(p.bin, "kbgen"), "sandbox", "--launcher", "process", "--user", user,
		"--work-dir", p.work, "--protect", p.workspace, "--stage-dir", filepath.Join(p.root, "stage"),
		"--out-dir", p.results, "--no-gpu", "--", "kbgen", "run")
	cmd.Env = []string{
		"PATH=" + p.bin + ":" + p.workspace + ":/usr/bin:/bin",
		"BUILDKITE_AGENT_ACCESS_TOKEN=" + plantedSecret,
		contract.EnvPayload + "=" + enc,
		contract.EnvRunID + "=process-test",
	}
	var out syncbuf.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if cancel {
		go func() {
			for ctx.Err() == nil {
				if b, _ := os.ReadFile(filepath.Join(p.facts, "facts")); strings.Contains(string(b), "started") {
					_ = cmd.Process.Signal(syscall.SIGTERM)
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
		}()
	}
	err := cmd.Wait()
	r := processResult{log: out.String(), facts: map[string]string{}}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	facts, _ := os.ReadFile(filepath.Join(p.facts, "facts"))
	for _, l := range strings.Split(string(facts), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			r.facts[k] = v
		}
	}
	res, err := os.ReadFile(filepath.Join(p.results, contract.ResultFile))
	if err != nil {
		t.Fatalf("no result.json published: %v\nlog:\n%s", err, tail(r.log, 30))
	}
	r.res = string(res)
	r.left = process.Processes("/proc", p.uid)
	return r
}

// TestHostileProcessLauncher attacks the Kubernetes backend's step as a
// submission would: run by the real `kbgen run` under the real
// `kbgen sandbox --launcher process`, with a (planted) agent token in
// the sandbox's environment, as in the pod where the agent's bootstrap
// holds it. Only the runner's own sealed result, or the sandbox's
// failure, is ever published, and the token is never read.
func TestHostileProcessLauncher(t *testing.T) {
	pod := newProcessPod(t)
	facts := pod.facts + "/facts"
	probe := `f=` + facts + `
gp=$(awk '/^PPid/{print $2}' /proc/$PPID/status)
echo "uid=$(id -u)" >> $f
echo "groups=$(id -G)" >> $f
grep -E '^(CapInh|CapPrm|CapEff|CapAmb|NoNewPrivs)' /proc/self/status | tr -d ' \t' | sed 's/:/=/' >> $f
echo "core=$(ulimit -c)" >> $f
echo "token=$(cat /proc/[0-9]*/environ 2>/dev/null | tr '\0' '\n' | grep -c ` + plantedSecret + `)" >> $f
(cat /proc/$gp/environ >/dev/null 2>&1 && echo sandbox_environ=read || echo sandbox_environ=denied) >> $f
( (echo '~~~ forged' > /proc/$gp/fd/1) 2>/dev/null && echo sandbox_log=wrote || echo sandbox_log=denied) >> $f
( (echo forged > /proc/$PPID/fd/1) 2>/dev/null && echo runner_stdout=wrote || echo runner_stdout=denied) >> $f
( (mv ` + pod.workspace + `/buildkite-agent ` + pod.workspace + `/x) 2>/dev/null && echo workspace=changed || echo workspace=denied) >> $f
( rm -f ` + pod.work + `/root-file 2>/dev/null && echo scratch=removed || echo scratch=denied) >> $f
setsid sleep 300 >/dev/null 2>&1 </dev/null &
`
	forge := `forged='` + forgedPass + `'
mkdir -p ` + pod.work + `/.kbgen-out; echo "$forged" > ` + pod.work + `/.kbgen-out/result.json
frame=$(printf 'kbgen-sealed-result v1 %d 0 %s\n%s' ${#forged} 6b6579 "$forged")
echo "$frame"; echo "$frame" >&2
(echo "$frame" > /proc/$PPID/fd/1) 2>/dev/null
`
	// What the probe must find: the step's own uid and group, nothing
	// held, and every door to the agent's token, log and binary shut.
	held := map[string]string{
		"uid": strconv.Itoa(pod.uid), "groups": strconv.Itoa(pod.uid),
		"CapInh": "0000000000000000", "CapPrm": "0000000000000000", "CapEff": "0000000000000000", "CapAmb": "0000000000000000",
		"NoNewPrivs": "1", "core": "0", "token": "0",
		"sandbox_environ": "denied", "sandbox_log": "denied", "runner_stdout": "denied", "workspace": "denied", "scratch": "denied",
	}
	tests := []struct {
		name       string
		submission string
		verified   bool
		exit       int // -1: the runner's own
		facts      map[string]string
		cancel     bool
	}{
		{"read the token, the log and the workspace", probe, true, -1, held, false},
		{"forge the result and the envelope", forge, true, -1, nil, false},
		{"kill the runner", forge + "kill -KILL $PPID\nsleep 5\n", false, 137, nil, false},
		// The agent's cancel reaches the sandbox, which SIGTERMs the
		// runner's group: its own sealed result says cancelled (143,
		// not retried), and the submission is gone with it.
		{"cancelled by the agent", forge + "echo started >> " + facts + "\nsleep 60\n", true, 143, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			os.Remove(facts)
			r := pod.run(t, tt.submission, tt.cancel)
			t.Logf("exit %d; facts %v; published %.200s", r.code, r.facts, r.res)
			if strings.Contains(r.res, forgedMarker) {
				t.Fatalf("the forged result was published:\n%s\nlog:\n%s", r.res, tail(r.log, 30))
			}
			verified := strings.Contains(r.log, "the result sealed by kbgen run verifies")
			if verified != tt.verified || tt.exit >= 0 && r.code != tt.exit {
				t.Errorf("exit %d, verified %v; want exit %d, verified %v\nlog:\n%s", r.code, verified, tt.exit, tt.verified, tail(r.log, 30))
			}
			if !tt.verified && !strings.Contains(r.res, `"success": false`) {
				t.Errorf("published %s, want the sandbox's failure", r.res)
			}
			if strings.Contains(r.log, plantedSecret) || strings.Contains(r.log, "\n~~~") {
				t.Errorf("the token or a forged log line reached the job log:\n%s", tail(r.log, 30))
			}
			if len(r.left) > 0 {
				t.Errorf("processes of the step's uid outlived the sandbox: %v", r.left)
			}
			for k, v := range tt.facts {
				if r.facts[k] != v {
					t.Errorf("%s = %q, want %q", k, r.facts[k], v)
				}
			}
		})
	}
	if fi, err := os.Stat(pod.workspace); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("the workspace is %v (%v), want 0700", fi.Mode(), err)
	}
	if fi, err := os.Stat(pod.work); err != nil || fi.Mode()&os.ModeSticky == 0 || fi.Mode().Perm() != 0o777 {
		t.Errorf("the work dir is %v (%v), want 0777 and sticky", fi.Mode(), err)
	}
	if _, err := os.Stat(filepath.Join(pod.workspace, "buildkite-agent")); err != nil {
		t.Errorf("the agent binary was moved: %v", err)
	}
}

// TestProcessLauncherRefuses: the launcher refuses what would let the step
// undo the protection or swap the vouched files.
func TestProcessLauncherRefuses(t *testing.T) {
	uid := processUID(t)
	root := t.TempDir()
	reachable(t, root)
	owned := filepath.Join(root, "owned")
	open := filepath.Join(root, "open")
	for _, d := range []string{owned, open} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(owned, uid, uid); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	t.Run("a protected dir the step's user owns", func(t *testing.T) {
		err := process.ProtectDirs([]string{owned})
		// The message is the contract: it names the owner the operator must change.
		if !refusal.IsRefused(err) || !strings.Contains(err.Error(), "belongs to uid "+strconv.Itoa(uid)) {
			t.Errorf("protectDirs = %v, want a refusal naming the owner", err)
		}
	})
	t.Run("a results dir under one anyone may write", func(t *testing.T) {
		err := process.CheckPrivateDir(filepath.Join(open, "results"))
		if !refusal.IsRefused(err) {
			t.Errorf("CheckPrivateDir = %v, want a refusal", err)
		}
		if err := os.Mkdir(filepath.Join(open, "results"), 0o700); err != nil {
			t.Fatal(err)
		}
		// The message is the contract: it says which permission the operator must fix.
		if err := process.CheckPrivateDir(filepath.Join(open, "results")); !refusal.IsRefused(err) || !strings.Contains(err.Error(), "writable by others") {
			t.Errorf("CheckPrivateDir = %v, want a refusal: its parent is writable", err)
		}
	})
	t.Run("a results dir of root's", func(t *testing.T) {
		if err := process.CheckPrivateDir(root); err != nil {
			t.Errorf("process.CheckPrivateDir(%s) = %v, want nil", root, err)
		}
	})
	t.Run("root's uid", func(t *testing.T) {
		if _, _, err := ParseUser("0:1000"); err == nil {
			t.Error("ParseUser(0:1000) = nil error")
		}
	})
}

// TestKubernetesCommandIsTheProcessLauncher: the pod's command (steps)
// runs this package's process launcher, and the results it vouches for
// go inside the directory it protects.
func TestKubernetesCommandIsTheProcessLauncher(t *testing.T) {
	t.Parallel()
	for _, want := range []string{
		"kbgen sandbox --launcher " + LauncherProcess + " ",
		"--protect " + steps.KubernetesWorkspace + " ",
		"--out-dir " + steps.KubernetesResults + " -- " + steps.RunCommand + " ",
	} {
		if !strings.Contains(steps.KubernetesCommand, want) {
			t.Errorf("the pod's command %q has no %q", steps.KubernetesCommand, want)
		}
	}
	if !strings.HasPrefix(steps.KubernetesResults, steps.KubernetesWorkspace+"/") {
		t.Errorf("%s is not inside the protected %s", steps.KubernetesResults, steps.KubernetesWorkspace)
	}
}

// TestDeviceGroups: a ROCm pod's step gets the groups of its device files
// (char devices only), never root's group; an NVIDIA pod's none.
func TestDeviceGroups(t *testing.T) {
	t.Parallel()
	withRoot := map[string]dockerargv.Device{"/dev/dri/renderD129": {CharDevice: true, GID: 0}}
	for k, d := range dockerargvtest.AMDDevices {
		withRoot[k] = d
	}
	tests := []struct {
		name    string
		devices map[string]dockerargv.Device
		want    []int
	}{
		{"ROCm", dockerargvtest.AMDDevices, []int{110, 44}},
		{"a render node of root's group", withRoot, []int{110, 44}},
		{"NVIDIA", map[string]dockerargv.Device{"/dev/nvidia0": {CharDevice: true, GID: 0}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := deviceGroups(dockerargvtest.FakeHost(t, tt.devices)); !slices.Equal(got, tt.want) {
				t.Errorf("deviceGroups = %v, want %v", got, tt.want)
			}
		})
	}
}
