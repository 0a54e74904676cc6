package sandbox

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/sandbox/dockerargv"
	"github.com/gpu-mode/kbgen/sandbox/refusal"
)

// fakeDocker returns a launcher that runs testdata/fake-docker and the
// directory that steers it and records its calls.
func fakeDocker(t *testing.T) (*Launcher, string) {
	t.Helper()
	dir := t.TempDir()
	t.Setenv("FAKE_DOCKER_DIR", dir)
	bin, err := filepath.Abs("testdata/fake-docker")
	if err != nil {
		t.Fatal(err)
	}
	return &Launcher{Docker: bin, Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}, Log: &bytes.Buffer{}, StopTimeout: 3 * time.Second}, dir
}

func touch(t *testing.T, dir, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func calls(t *testing.T, dir string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "calls"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		// Only the verb and the last word (the name): run's flags are
		// covered by the plan tests.
		f := strings.Fields(l)
		if f[0] == "ps" { // the listing removeStale reads
			out = append(out, "ps")
			continue
		}
		out = append(out, f[0]+" "+f[len(f)-1])
	}
	return out
}

var testSpec = &dockerargv.Spec{Name: "kbgen-job-1", Lines: [][]string{{"run"}, {"--name", "kbgen-job-1"}, {"img"}, {"true"}}}

// rmSpec is testSpec with --rm, as the sandbox plans every run.
var rmSpec = &dockerargv.Spec{Name: "kbgen-job-1", Lines: [][]string{{"run"}, {"--name", "kbgen-job-1"}, {"--rm"}, {"img"}, {"true"}}}

// TestLaunchExitCodes: the container's status comes back, and the `docker
// rm` after the run is made only where the container may still be there:
// no --rm, or docker's own failure (125 and up). A run with --rm whose
// client returned the container's status was removed before it returned.
// After a 137 the engine is asked whether it OOM-killed the container.
func TestLaunchExitCodes(t *testing.T) {
	after := []string{"run true", "rm kbgen-job-1"}
	for _, tc := range []struct {
		name, code string
		spec       *dockerargv.Spec
		want       []string
	}{
		{"0 without --rm", "0", testSpec, after},
		{"1 without --rm", "1", testSpec, after},
		{"75 without --rm", "75", testSpec, after},
		{"125 without --rm", "125", testSpec, after},
		{"137 without --rm (the engine asked about an OOM kill)", "137", testSpec, append(after, "events {{.Action}}")},
		{"0 with --rm", "0", rmSpec, after[:1]},
		{"3 with --rm", "3", rmSpec, after[:1]},
		{"75 with --rm", "75", rmSpec, after[:1]},
		{"125 with --rm (docker's own failure)", "125", rmSpec, after},
		{"137 with --rm", "137", rmSpec, append(after, "events {{.Action}}")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, dir := fakeDocker(t)
			touch(t, dir, "exit", tc.code)
			got, err := l.Run(context.Background(), tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			if got != atoi(tc.code) {
				t.Errorf("exit code = %d, want %s", got, tc.code)
			}
			if !strings.Contains(l.Stdout.(*bytes.Buffer).String(), "container says hello") ||
				!strings.Contains(l.Stderr.(*bytes.Buffer).String(), "container complains") {
				t.Error("container output was not passed through")
			}
			if got := calls(t, dir); !slices.Equal(got, tc.want) {
				t.Errorf("docker calls = %q, want %q", got, tc.want)
			}
		})
	}
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// TestLaunchRemovesStaleContainer: before the run, the launcher removes a
// kbgen container of the job's own name (a killed job's retry) and any
// kbgen container labelled with one of the job's GPUs (a SIGKILLed
// sandbox's, still running on a GPU the lease has just given this job),
// and says so; other GPUs' containers and foreign ones stay.
func TestLaunchRemovesStaleContainer(t *testing.T) {
	gpuSpec := &dockerargv.Spec{Name: "kbgen-job-1", GPUs: []string{"GPU-a", "GPU-b"}, Lines: rmSpec.Lines}
	for _, tc := range []struct {
		name       string
		spec       *dockerargv.Spec
		containers string // NAME<tab>GPUS lines
		removed    []string
		log        string
	}{
		{"none", gpuSpec, "", nil, ""},
		{"same name", rmSpec, "kbgen-job-1\t\n", []string{"kbgen-job-1"}, "removed stale container kbgen-job-1 (left by a killed job of the same id)"},
		{"on one of its GPUs", gpuSpec, "kbgen-job-0\tGPU-b\nkbgen-job-9\tGPU-c\n", []string{"kbgen-job-0"},
			"removed stale container kbgen-job-0 (left by a killed job on GPU GPU-b, which this job now leases)"},
		{"multi-GPU container overlapping", gpuSpec, "kbgen-job-0\tGPU-c,GPU-a\n", []string{"kbgen-job-0"}, "GPU GPU-a"},
		{"other GPUs and foreign containers stay", gpuSpec, "kbgen-job-9\tGPU-c,GPU-d\nvendor-db\tGPU-a\nkbgen-job-8\t\n", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, dir := fakeDocker(t)
			touch(t, dir, "containers", tc.containers)
			l.RemoveStale(context.Background(), tc.spec)
			if _, err := l.Run(context.Background(), tc.spec); err != nil {
				t.Fatal(err)
			}
			want := []string{"ps"}
			for _, name := range tc.removed {
				want = append(want, "rm "+name)
			}
			want = append(want, "run true")
			if got := calls(t, dir); !slices.Equal(got, want) {
				t.Errorf("docker calls = %q, want %q", got, want)
			}
			log := l.Log.(*bytes.Buffer).String()
			if (tc.log == "") != (log == "") || !strings.Contains(log, tc.log) {
				t.Errorf("log = %q, want %q", log, tc.log)
			}
		})
	}
}

// waitFor polls for a file the fake docker writes.
func waitFor(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(path); err == nil {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s never appeared", path)
}

func TestLaunchForwardsSignals(t *testing.T) {
	t.Run("SIGTERM stops", func(t *testing.T) {
		l, dir := fakeDocker(t)
		touch(t, dir, "wait", "")
		sigs := make(chan os.Signal, 1)
		l.Signals = sigs
		go func() {
			waitFor(t, filepath.Join(dir, "running"))
			sigs <- syscall.SIGTERM
		}()
		code, err := l.Run(context.Background(), rmSpec)
		if err != nil || code != 143 {
			t.Fatalf("Run = %d, %v; want 143", code, err)
		}
		want := []string{"run true", "stop kbgen-job-1", "rm kbgen-job-1"}
		got := calls(t, dir)
		if !slices.Equal(got, want) {
			t.Errorf("docker calls = %q, want %q", got, want)
		}
		b, _ := os.ReadFile(filepath.Join(dir, "calls"))
		if !strings.Contains(string(b), "stop --time 3 kbgen-job-1") {
			t.Errorf("stop without the grace period: %s", b)
		}
	})
	t.Run("second signal kills", func(t *testing.T) {
		l, dir := fakeDocker(t)
		touch(t, dir, "wait", "")
		touch(t, dir, "nostop", "")
		sigs := make(chan os.Signal, 2)
		l.Signals = sigs
		go func() {
			waitFor(t, filepath.Join(dir, "running"))
			sigs <- syscall.SIGINT
			time.Sleep(100 * time.Millisecond)
			sigs <- syscall.SIGINT
		}()
		code, err := l.Run(context.Background(), testSpec)
		if err != nil || code != 137 {
			t.Fatalf("Run = %d, %v; want 137", code, err)
		}
		got := calls(t, dir)
		if !slices.Contains(got, "stop kbgen-job-1") || !slices.Contains(got, "kill kbgen-job-1") {
			t.Errorf("docker calls = %q, want a stop then a kill", got)
		}
	})
}

func TestLaunchWithoutDocker(t *testing.T) {
	l := &Launcher{Docker: filepath.Join(t.TempDir(), "no-docker")}
	_, err := l.Run(context.Background(), testSpec)
	if !refusal.IsRefused(err) {
		t.Errorf("err = %v, want a refusal (exit 75)", err)
	}
}

// TestStopGraceBelowAgentGrace: docker stop's grace defaults to 5 s, half
// the agent's default cancel-grace-period (10 s), so the container is gone
// before the agent gives up on the job (docs/isolation.md#signals-and-lifetime).
func TestStopGraceBelowAgentGrace(t *testing.T) {
	for _, tt := range []struct {
		timeout time.Duration
		want    string
	}{{0, "5"}, {8 * time.Second, "8"}, {2500 * time.Millisecond, "3"}} {
		if got := (&Launcher{StopTimeout: tt.timeout}).stopSeconds(); got != tt.want {
			t.Errorf("StopTimeout %v: docker stop --time %s, want %s", tt.timeout, got, tt.want)
		}
	}
}
