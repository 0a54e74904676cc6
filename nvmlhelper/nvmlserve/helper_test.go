package nvmlserve

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"

	"github.com/gpu-mode/kbgen/nvmlhelper"
)

// helperMode makes this test binary act as kbgen-nvml (serving a mock
// node) when set, so the client is tested against a real process: pipes,
// deadlines, exits.
const helperMode = "KBGEN_TEST_NVML_MODE"

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperMode); mode != "" {
		os.Exit(actAsHelper(mode))
	}
	os.Exit(m.Run())
}

func actAsHelper(mode string) int {
	t := &testing.T{}
	s := node(t, 2, nvswitch, gpus.H100_SXM5_80GB)
	switch mode {
	case "nolib":
		s.InitFunc = func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }
	case "hang":
		fmt.Println(`{"protocol":1,"driver":"570.124.06"}`)
		time.Sleep(time.Hour)
	case "crash":
		fmt.Println(`{"protocol":1,"driver":"570.124.06"}`)
		_, _ = io.ReadAll(io.LimitReader(os.Stdin, 1))
		fmt.Fprintln(os.Stderr, "kbgen-nvml: segmentation fault in libnvidia-ml")
		return 139
	case "grandchild":
		// A child that keeps the helper's stderr open outlives it.
		child := exec.Command("sleep", "3")
		child.Stderr = os.Stderr
		_ = child.Start()
		fmt.Println(`{"protocol":1,"driver":"570.124.06"}`)
		time.Sleep(time.Hour)
	case "gone":
		fmt.Println(`{"protocol":1,"driver":"570.124.06"}`)
		fmt.Fprintln(os.Stderr, "kbgen-nvml: the driver went away")
		return 3
	case "future":
		fmt.Println(`{"protocol":2,"driver":"580.1"}`)
		time.Sleep(time.Hour)
	case "loader":
		fmt.Fprintln(os.Stderr, "kbgen-nvml: /lib/x86_64-linux-gnu/libc.so.6: version `GLIBC_2.34' not found")
		return 127
	}
	if err := Serve(s, os.Stdin, os.Stdout); err != nil {
		return 1
	}
	return 0
}

// startHelper runs this test binary as the helper in mode.
func startHelper(t testing.TB, mode string, timeout time.Duration) (*nvmlhelper.Helper, error) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// GORACE: a race-enabled binary sleeps a second at exit by default.
	h, err := nvmlhelper.Start(exe, []string{helperMode + "=" + mode, "GORACE=atexit_sleep_ms=0"}, timeout)
	if h != nil {
		t.Cleanup(func() { _ = h.Close() })
	}
	return h, err
}

func TestHelper(t *testing.T) {
	t.Parallel()
	h, err := startHelper(t, "serve", 0)
	if err != nil {
		t.Fatal(err)
	}
	if h.Driver != "570.124.06" {
		t.Errorf("Driver = %q, want the hello's 570.124.06", h.Driver)
	}
	samples, err := h.Sample("GPU-00000001-0000-4000-8000-000000000001")
	if err != nil || len(samples) != 1 || *samples[0].SMClockMHz != 1979 {
		t.Fatalf("Sample = %+v, %v; want GPU 1 at 1979 MHz", samples, err)
	}
	// A request the helper refuses leaves it serving.
	_, err = h.Sample("GPU-ffffffff-0000-4000-8000-000000000001")
	// NVML's return code in the text is the contract: it is what the operator looks up.
	if re := new(nvmlhelper.ReplyError); !errors.As(err, &re) || !strings.Contains(re.Msg, "ERROR_INVALID_ARGUMENT") {
		t.Errorf("Sample(unknown) error = %v, want the helper's ERROR_INVALID_ARGUMENT", err)
	}
	inv, err := h.Inventory()
	if err != nil || len(inv.GPUs) != 2 || inv.Links[0][1] != "NV18" {
		t.Fatalf("Inventory = %+v, %v; want 2 GPUs on NV18", inv, err)
	}
	if err := h.Close(); err != nil {
		t.Errorf("Close = %v, want the helper to exit 0 when its stdin closes", err)
	}
	if _, err := h.Sample(); err == nil {
		t.Error("Sample after Close succeeded")
	}
}

func TestHelperFails(t *testing.T) {
	t.Parallel()
	tests := []struct {
		mode  string
		start bool   // fails to start
		want  any    // the kind: a pointer to its type, for errors.As
		says  string // in the helper's own words (Msg, Stderr), where it has any
	}{
		{mode: "nolib", start: true, want: new(*nvmlhelper.ReplyError), says: "loading NVML: ERROR_LIBRARY_NOT_FOUND"},
		{mode: "loader", start: true, want: new(*nvmlhelper.ExitError), says: "GLIBC_2.34' not found"},
		{mode: "future", start: true, want: new(*nvmlhelper.ProtocolError)},
		{mode: "hang", want: new(*nvmlhelper.NoReplyError)},
		{mode: "crash", want: new(*nvmlhelper.ExitError), says: "segmentation fault in libnvidia-ml"},
		// Gone before the request: the write or the read fails, and
		// either way the error carries what it said on stderr.
		{mode: "gone", want: new(*nvmlhelper.ExitError), says: "the driver went away"},
		// Killed after its silence, the helper's child still holds its
		// stderr: the call returns anyway (WaitDelay), not after the child.
		{mode: "grandchild", want: new(*nvmlhelper.NoReplyError)},
	}
	for _, tc := range tests {
		t.Run(tc.mode, func(t *testing.T) {
			t.Parallel()
			// Seconds, not milliseconds: the hello comes from this race-built
			// test binary re-executed, which took over 200 ms on a loaded
			// 2-CPU machine; only hang and grandchild wait the whole limit.
			h, err := startHelper(t, tc.mode, 3*time.Second)
			if tc.start {
				wantHelperError(t, "Start", err, tc.want, tc.says)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			_, err = h.Sample()
			wantHelperError(t, "Sample", err, tc.want, tc.says)
			// Broken once, the helper stays closed: callers fall back once.
			if _, again := h.Inventory(); !errors.Is(again, err) {
				t.Errorf("the next call's error = %v, want the first failure again", again)
			}
		})
	}
}

// wantHelperError: err is of want's kind (errors.As into want) and says
// says in the helper's own words.
func wantHelperError(t *testing.T, call string, err error, want any, says string) {
	t.Helper()
	if !errors.As(err, want) {
		t.Fatalf("%s error = %v, want a %T", call, err, want)
	}
	var words string
	switch e := want.(type) {
	case **nvmlhelper.ReplyError:
		words = (*e).Msg
	case **nvmlhelper.ExitError:
		words = (*e).Stderr
	case **nvmlhelper.NoReplyError:
		if (*e).Timeout != 3*time.Second {
			t.Errorf("%s error = %v, want the 3s timeout", call, err)
		}
	case **nvmlhelper.ProtocolError:
		if (*e).Helper == nvmlhelper.Protocol {
			t.Errorf("%s error = %v, want another protocol than ours", call, err)
		}
	}
	// The helper's own words are the contract: they are all the operator has of why it failed.
	if !strings.Contains(words, says) {
		t.Errorf("%s error = %v, want it to say %q", call, err, says)
	}
}
