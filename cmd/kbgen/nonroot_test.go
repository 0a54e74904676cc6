package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gpu-mode/kbgen/internal/kbgenbin"
	"github.com/gpu-mode/kbgen/payload"
)

// TestVerdictPipeUnreachableWithoutRoot runs the pipe cheats the way they
// run in the container: as an unprivileged user. There the built-in
// harness is not dumpable, so the submission cannot open
// /proc/<harness>/fd/N at all: the forged `check: pass` never reaches the
// pipe, and the harness's own `check: fail` is the only verdict. (As root
// the forgery does arrive, and only the conflicting-verdict rule stops it;
// runner/hostile_test.go covers that case.)
func TestVerdictPipeUnreachableWithoutRoot(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the kbgen binary")
	}
	py := "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		t.Skip("no /usr/bin/python3 usable by an unprivileged user")
	}
	dir, err := os.MkdirTemp("", "kbgen-nonroot-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	bin := kbgenbin.Path(t)
	for _, cheat := range []string{"cheat-pipe", "cheat-daemon"} {
		t.Run(cheat, func(t *testing.T) {
			sub := filepath.Join(dir, cheat)
			if err := os.Mkdir(sub, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(sub, 0o777); err != nil { // past the umask
				t.Fatal(err)
			}
			job := exampleJobFile(t, sub, "identity", cheat, payload.ModeTest)
			_ = os.Chmod(job, 0o644)
			out := filepath.Join(sub, "result.json")
			cmd := exec.Command(bin, "run", "--payload-file", job, "--out", out, "--workdir", filepath.Join(sub, "work"), "--no-upload")
			cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + sub, "LANG=C.UTF-8"}
			if os.Geteuid() == 0 {
				cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
			}
			if o, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("kbgen run: %v\n%s", err, o)
			}
			var res payload.FullResult
			b, _ := os.ReadFile(out)
			if err := json.Unmarshal(b, &res); err != nil {
				t.Fatal(err)
			}
			r := res.Runs["test"].Run
			if r == nil || r.Passed || r.Result["check"] != "fail" || strings.Contains(r.Stderr, "conflicting") {
				t.Errorf("a forged verdict reached the pipe: %+v", r)
			}
		})
	}
}
