package runner

// Issue 25, the runner's side: a machine fault only on the runner's own
// evidence, an out dir that cannot hold the runner, and kbgen-nvml alive
// for every timed run.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/nvmlhelper"
	"github.com/gpu-mode/kbgen/payload"
	"github.com/gpu-mode/kbgen/seal"
)

// noDevicePy is a harness whose test run prints CUDA's no-device error
// and dies, whatever the GPU says: what a submission shopping for a
// faster machine prints after timing itself in its untimed test run.
const noDevicePy = "import os, sys\nif sys.argv[1] == 'test':\n    sys.stderr.write('RuntimeError: CUDA error: no CUDA-capable device is detected\\n')\n    sys.exit(110)\nos.write(int(os.environ['POPCORN_FD']), b'check: pass\\n')\n"

// realPython is the interpreter python3 on PATH runs (a pyenv shim is a
// bash script that needs the rest of PATH).
var realPython = sync.OnceValue(func() string {
	b, err := exec.Command("python3", "-c", "import sys; print(sys.executable)").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
})

// gpuTools makes a PATH directory holding python3 and, per how, a
// stand-in nvidia-smi: "answers" (testdata/bin's: two GPUs), "fails" (a
// driver that does not answer, as nvidia-smi prints it), "" (none).
func gpuTools(t *testing.T, how string) string {
	t.Helper()
	dir := t.TempDir()
	if py := realPython(); py != "" {
		if err := os.Symlink(py, filepath.Join(dir, "python3")); err != nil {
			t.Fatal(err)
		}
	}
	script := ""
	switch how {
	case "answers":
		b, err := os.ReadFile("testdata/bin/nvidia-smi")
		if err != nil {
			t.Fatal(err)
		}
		script = string(b)
	case "fails":
		script = "#!/bin/sh\necho \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\" >&2\nexit 9\n"
	}
	if script != "" {
		if err := os.WriteFile(filepath.Join(dir, "nvidia-smi"), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// A test run that prints a device failure is the machine's fault only
// when the GPU does not answer the runner either, asked after the program
// is gone: kbgen-nvml first, then nvidia-smi. Before issue 25 the text
// alone made every row a machine fault.
func TestDeviceFailureNeedsTheRunnersEvidence(t *testing.T) {
	needPython(t)
	helperSays := func(n int, err error) func() (int, error) { return func() (int, error) { return n, err } }
	tests := []struct {
		name     string
		tools    string
		helper   func() (int, error)
		machine  bool
		evidence string // in the run's stderr (the run's failure) or the error (the machine's)
	}{
		{"nvidia-smi answers", "answers", nil, false, "the GPU answers the runner (nvidia-smi lists 2)"},
		{"kbgen-nvml answers, no nvidia-smi", "", helperSays(1, nil), false, "the GPU answers the runner (kbgen-nvml lists 1)"},
		{"kbgen-nvml failed, nvidia-smi answers", "answers", helperSays(0, errors.New("kbgen-nvml: closed")), false, "(nvidia-smi lists 2)"},
		{"nvidia-smi fails", "fails", nil, true, "couldn't communicate with the NVIDIA driver"},
		{"kbgen-nvml lists none, nvidia-smi fails", "fails", helperSays(0, nil), true, "kbgen-nvml lists no GPU; nvidia-smi: NVIDIA-SMI has failed"},
		{"no GPU tool at all", "", nil, true, "neither nvidia-smi nor rocm-smi lists a GPU"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, err := evaluate(t, pyJob(payload.ModeLeaderboard, noDevicePy, ""), func(o *EvalOptions) {
				o.Environ = []string{"PATH=" + gpuTools(t, tc.tools)}
				o.GPUCount = tc.helper
			})
			test := res.Runs["test"].Run
			if test == nil || test.Passed {
				t.Fatalf("test run %+v", test)
			}
			if !tc.machine {
				if err != nil || !res.Success || !strings.Contains(test.Stderr, tc.evidence) {
					t.Fatalf("want the run's own failure saying %q; error %v (fault %v), stderr:\n%s", tc.evidence, err, FaultOf(err), test.Stderr)
				}
				if _, ok := res.Runs["benchmark"]; ok {
					t.Error("a failed test run must still stop the ranked run")
				}
				return
			}
			// The message is the contract: it carries the probe's evidence for the operator.
			if FaultOf(err) != FaultMachine || !strings.Contains(err.Error(), tc.evidence) || !strings.Contains(res.Error, "GPU runtime failed") {
				t.Fatalf("want a machine fault saying %q; fault %v: %v", tc.evidence, FaultOf(err), err)
			}
		})
	}
}

// runSealed runs cfg as the sandbox runs `kbgen run --sealed` (the key on
// stdin, the envelope on Sealed), with the out dir prepared by plant, and
// fails when Run does not return within limit. It returns the outcome,
// what the envelope holds and the error.
func runSealed(t *testing.T, ctx context.Context, cfg *payload.Config, plant func(outDir string), limit time.Duration, mutate ...func(*RunOptions)) (Outcome, seal.Contents, error) {
	t.Helper()
	dir := t.TempDir()
	outDir := filepath.Join(dir, "out")
	if err := os.Mkdir(outDir, 0o755); err != nil {
		t.Fatal(err)
	}
	plant(outDir)
	key, err := seal.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	var sealed, log bytes.Buffer
	opts := RunOptions{
		PayloadFile: writeJSON(t, filepath.Join(dir, "job.json"), cfg),
		Stdin:       strings.NewReader(key.Text()),
		Out:         filepath.Join(outDir, contract.ResultFile),
		WorkDir:     filepath.Join(dir, "work"),
		SystemFile:  writeJSON(t, filepath.Join(dir, "system.json"), testSystem),
		NoUpload:    true,
		Environ:     []string{"PATH=" + os.Getenv("PATH")},
		NVML:        nvmlhelper.Location{Absent: "none in this test"},
		Log:         &log,
		Sealed:      &sealed,
	}
	for _, m := range mutate {
		m(&opts)
	}
	type ran struct {
		out Outcome
		err error
	}
	done := make(chan ran, 1)
	go func() {
		out, err := Run(ctx, opts)
		done <- ran{out, err}
	}()
	var r ran
	select {
	case r = <-done:
	case <-time.After(limit):
		unblockFIFOs(outDir)
		<-done
		t.Fatalf("Run did not return within %v: blocked on the out dir\n%s", limit, log.String())
	}
	c, err := seal.Open(sealed.Bytes(), key)
	if err != nil {
		t.Fatalf("no sealed result (code %d, %v): %v\n%s", exitcode.Of(r.err), r.err, err, log.String())
	}
	return r.out, c, r.err
}

// unblockFIFOs opens every FIFO in dir for reading, without waiting, so a
// writer blocked on one goes on (a failed test must still end).
func unblockFIFOs(dir string) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.Type()&os.ModeNamedPipe != 0 {
			if f, err := os.OpenFile(filepath.Join(dir, e.Name()), os.O_RDONLY|syscall.O_NONBLOCK, 0); err == nil {
				time.AfterFunc(5*time.Second, func() { f.Close() })
			}
		}
	}
}

// plantFIFOs makes FIFOs under the names the runner writes in the out
// dir, as a submission can (issue 25: the runner's os.WriteFile of
// result.json.tmp blocked until the step's timeout, holding the GPU).
func plantFIFOs(t *testing.T) func(string) {
	return func(outDir string) {
		for _, name := range []string{"result.json.tmp", "noise.json.tmp", contract.ResultFile, contract.NoiseFile} {
			if err := syscall.Mkfifo(filepath.Join(outDir, name), 0o666); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// FIFOs in the out dir hold nothing: the run seals its result (and noise
// record) and returns at once, and a cancel still ends with its sealed
// 143. Before the fix both runs blocked in os.WriteFile for good.
func TestOutDirFIFOsCannotHoldTheRunner(t *testing.T) {
	needPython(t)
	t.Run("completed", func(t *testing.T) {
		_, c, err := runSealed(t, context.Background(), example(t, "identity", "submission", payload.ModeLeaderboard), plantFIFOs(t), time.Minute)
		if err != nil || len(c.Result) == 0 || len(c.Noise) == 0 {
			t.Fatalf("%v; sealed result %d bytes, noise %d bytes", err, len(c.Result), len(c.Noise))
		}
		if !bytes.Contains(c.Result, []byte(`"success": true`)) {
			t.Errorf("sealed result:\n%s", c.Result)
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		// As cmd/kbgen's signal context cancels on SIGTERM.
		ctx, cancel := context.WithCancelCause(context.Background())
		time.AfterFunc(1500*time.Millisecond, func() { cancel(errors.New("received terminated")) })
		_, c, err := runSealed(t, ctx, example(t, "vectoradd", "hang", payload.ModeLeaderboard), plantFIFOs(t), 30*time.Second)
		if exitcode.Of(err) != exitcode.Canceled || !strings.Contains(string(c.Result), "received terminated") {
			t.Fatalf("code %d (%v), sealed result:\n%s", exitcode.Of(err), err, c.Result)
		}
	})
}

// kbgen-nvml lives for the whole job: every timed run is read through it
// (source nvml), none falls back to nvidia-smi because the runner's sweep
// after a harness killed it, and its stdin is closed at the job's end.
// Before the fix the sweep after the warm-up SIGKILLed it: every run said
// source nvidia-smi, nvml_absent "… exited (signal: killed) …".
func TestNVMLHelperLivesForTheJob(t *testing.T) {
	needPython(t)
	helper, err := filepath.Abs("testdata/nvml/kbgen-nvml")
	if err != nil {
		t.Fatal(err)
	}
	helperLog := filepath.Join(t.TempDir(), "helper.log")
	out, c, err := runSealed(t, context.Background(), example(t, "identity", "submission", payload.ModeLeaderboard), func(string) {}, time.Minute, func(o *RunOptions) {
		o.NVML = nvmlhelper.Location{Path: helper}
		o.Environ = append(o.Environ, "KBGEN_NVML_LOG="+helperLog)
	})
	if err != nil || out.Noise == nil {
		t.Fatalf("code %d: %v, noise %v", exitcode.Of(err), err, out.Noise)
	}
	// The noise.json the host believes says so too.
	if n := bytes.Count(c.Noise, []byte(`"source": "nvml"`)); n != 2 {
		t.Errorf("the sealed noise.json names source nvml %d times, want 2:\n%s", n, c.Noise)
	}
	for _, key := range []string{"benchmark", "leaderboard"} {
		run := out.Noise.Runs[key]
		if run == nil {
			t.Fatalf("no %s run in the noise record", key)
		}
		if nv := run.NVIDIA; nv.Source != "nvml" || nv.NVMLAbsent != "" || nv.UUID != "GPU-6f3b2a10-1c2d-4e5f-8a9b-0c1d2e3f4a5b" {
			t.Errorf("%s: source %q, nvml_absent %q, uuid %q; want every timed run read through kbgen-nvml", key, nv.Source, nv.NVMLAbsent, nv.UUID)
		}
	}
	b, err := os.ReadFile(helperLog)
	if err != nil {
		t.Fatal(err)
	}
	// Two timed runs, a sample before and after each.
	if got, want := string(b), strings.Repeat("sample\n", 4)+"stdin closed\n"; got != want {
		t.Errorf("the helper's log:\n%s\nwant:\n%s", got, want)
	}
}

// The whole case through Run: a submission whose test run prints
// the no-device text exits 75 only when the runner's own probe agrees.
func TestRunDeviceFailureExitCode(t *testing.T) {
	needPython(t)
	helper, err := filepath.Abs("testdata/nvml/kbgen-nvml")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		nvml nvmlhelper.Location
		code int
	}{
		{"kbgen-nvml answers", nvmlhelper.Location{Path: helper}, exitcode.OK},
		{"nothing answers", nvmlhelper.Location{Absent: "none"}, exitcode.TempFail},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := runSealed(t, context.Background(), pyJob(payload.ModeLeaderboard, noDevicePy, ""), func(string) {}, time.Minute, func(o *RunOptions) {
				o.NVML = tc.nvml
				o.Environ = []string{"PATH=" + gpuTools(t, ""), "KBGEN_NVML_LOG=" + filepath.Join(t.TempDir(), "log")}
			})
			if got := exitcode.Of(err); got != tc.code {
				t.Fatalf("code %d (%v), want %d", got, err, tc.code)
			}
		})
	}
}

// A full disk is the machine's fault (75) except in a sealed run on a
// tmpfs, the job's own: then the submission's (1). The real case, a
// submission filling its container's tmpfs, is in TestSealedRunnerAsPID1.
func TestOwnDiskFull(t *testing.T) {
	t.Parallel()
	var st syscall.Statfs_t
	if err := syscall.Statfs("/dev/shm", &st); err != nil || st.Type != tmpfsMagic {
		t.Skip("/dev/shm is not a tmpfs here: a full tmpfs not tested apart (TestSealedRunnerAsPID1 mounts one)")
	}
	onDisk := t.TempDir()
	if syscall.Statfs(onDisk, &st) == nil && st.Type == tmpfsMagic {
		onDisk = "" // TMPDIR is a tmpfs: no disk-backed path to compare
	}
	full := func(path string) error {
		return fmt.Errorf("writing cases file: %w", &os.PathError{Op: "write", Path: path, Err: syscall.ENOSPC})
	}
	tests := []struct {
		name   string
		sealed bool
		err    error
		code   int
	}{
		{"sealed, tmpfs full", true, full("/dev/shm/kbgen-none/work/cases.txt"), exitcode.Failure},
		{"sealed, tmpfs out of quota", true, &os.PathError{Op: "mkdir", Path: "/dev/shm/x", Err: syscall.EDQUOT}, exitcode.Failure},
		{"unsealed, tmpfs full", false, full("/dev/shm/x"), exitcode.TempFail},
		{"sealed, disk full", true, full(filepath.Join(onDisk, "cases.txt")), exitcode.TempFail},
		{"sealed, no path", true, syscall.ENOSPC, exitcode.TempFail},
		{"sealed, another failure", true, machineFault("no GPU visible"), exitcode.TempFail},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "sealed, disk full" && onDisk == "" {
				t.Skip("TMPDIR is a tmpfs")
			}
			o := RunOptions{}
			if tc.sealed {
				o.Sealed = io.Discard
			}
			if got := exitcode.Of(withFault(o.ownDiskFull(tc.err))); got != tc.code {
				t.Errorf("exit %d for %v, want %d", got, tc.err, tc.code)
			}
		})
	}
}
