package sandbox

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/internal/syncbuf"
	"github.com/gpu-mode/kbgen/plugincfg"
	"github.com/gpu-mode/kbgen/sandbox/dockerargv"
)

// TestHostileSubmissionsInContainer is the sandbox's half of the hostile
// submission suite (the runner's half is runner/hostile_test.go): each
// attack runs as the submission would, inside the real container, and
// must fail for the reason the sandbox's argv gives.
func TestHostileSubmissionsInContainer(t *testing.T) {
	cfg := plugincfg.GPUDocker{GPUs: 1, CPUs: 1, Memory: "96m", ShmSize: "16m", PidsLimit: 128, Network: "none"}
	tests := []struct {
		name   string
		script string
		want   string // a line the script prints when the attack failed
		flag   string // the argv flag that stops it
	}{
		// "unreachable", not a timeout: there is no interface to send on,
		// which a machine that merely lacks internet would not show.
		{"open a network connection", `nc -w 2 1.1.1.1 80 </dev/null 2>&1 | grep -q unreachable && echo blocked`, "blocked", "--network none"},
		{"find a route out", `[ -z "$(ip route)" ] && echo blocked`, "blocked", "--network none"},
		{"write outside the work dir", `for p in /etc/x /usr/x /bin/x /x /kbgen/x; do (echo > $p) 2>/dev/null && echo "wrote $p"; done; echo done`, "done", "--read-only"},
		{"replace the runner", `(cp /bin/busybox /usr/local/bin/kbgen) 2>/dev/null || echo blocked`, "blocked", "--mount …/usr/local/bin/kbgen,readonly"},
		{"fill /dev/shm", `dd if=/dev/zero of=/dev/shm/fill bs=1M count=64 2>/dev/null; echo shm_kb=$(du -k /dev/shm/fill | cut -f1)`, "shm_kb=16384", "--tmpfs /dev/shm:…,size="},
		{"fill the disk", `dd if=/dev/zero of=/work/fill bs=1M count=512 2>/dev/null; echo dd=$?`, "dd=1", "--tmpfs size / --memory"},
		{"read the agent token", `cat /proc/[0-9]*/environ 2>/dev/null | tr '\0' '\n' | grep -c -e BUILDKITE_ -e ` + plantedSecret + ` || echo none`, "none", "--env allow-list"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runInSandbox(t, cfg, tt.script)
			if !strings.Contains(r.stdout, tt.want) || strings.Contains(r.stdout, "wrote ") {
				t.Errorf("attack not stopped by %s: exit %d\nstdout:\n%s\nstderr:\n%s", tt.flag, r.code, r.stdout, r.stderr)
			}
		})
	}
}

// TestHostileFillsShmInodes: 70,000 empty files in /dev/shm (no bytes,
// so the size bound does not stop them) stop at ShmInodes, inside the
// container. The memory limit leaves room for that many inodes.
func TestHostileFillsShmInodes(t *testing.T) {
	cfg := plugincfg.GPUDocker{GPUs: 1, CPUs: 1, Memory: "256m", ShmSize: "16m", PidsLimit: 128, Network: "none"}
	script := fmt.Sprintf(`cd /dev/shm && seq 1 70000 | xargs touch 2>/dev/null; n=$(ls | wc -l); echo "shm_files=$n"
[ "$n" -ge %d ] && [ "$n" -lt %d ] && echo bounded`, dockerargv.ShmInodes-16, dockerargv.ShmInodes)
	r := runInSandbox(t, cfg, script)
	t.Logf("%s", strings.TrimSpace(r.stdout))
	if !strings.Contains(r.stdout, "bounded") {
		t.Errorf("/dev/shm's files were not stopped just below %d: exit %d\nstdout:\n%s\nstderr:\n%s", dockerargv.ShmInodes, r.code, r.stdout, r.stderr)
	}
}

// TestHostileIgnoresSIGTERM: a submission that ignores SIGTERM is killed
// when the stop grace period runs out.
func TestHostileIgnoresSIGTERM(t *testing.T) {
	image := runInSandboxImage(t)
	spec := plannedSpec(t, image, "ignores-sigterm", `trap "" TERM; echo started; while :; do sleep 1; done`)
	var stdout syncbuf.Buffer
	sigs := make(chan os.Signal, 1)
	l := &Launcher{Stdout: &stdout, Stderr: &stdout, Signals: sigs, StopTimeout: 2 * time.Second}
	go func() {
		for !strings.Contains(stdout.String(), "started") {
			time.Sleep(50 * time.Millisecond)
		}
		sigs <- syscall.SIGTERM
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	code, err := l.Run(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	t.Logf("exit %d after %v", code, took.Round(time.Millisecond))
	if code != 137 {
		t.Errorf("exit %d, want 137 (SIGKILL after the grace period)", code)
	}
}
