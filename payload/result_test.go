package payload

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// TestFailedCarriesKernelbotsDeviceCount: a failure nothing was probed for
// says device_count 1, Kernelbot's default, not 0; a probed count stays.
func TestFailedCarriesKernelbotsDeviceCount(t *testing.T) {
	t.Parallel()
	b, err := json.Marshal(Failed(SystemInfo{}, errors.New("no agent took it")))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"device_count":1,`) || !strings.Contains(string(b), `"success":false,"error":"no agent took it"`) {
		t.Errorf("got %s", b)
	}
	if got := Failed(SystemInfo{DeviceCount: 8}, errors.New("x")).System.DeviceCount; got != 8 {
		t.Errorf("a probed count became %d", got)
	}
}

func TestImpliedMode(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		runs []string
		want Mode
	}{
		{[]string{"test"}, ModeTest},
		{[]string{}, ModeTest},
		{[]string{"benchmark"}, ModeBenchmark},
		{[]string{"test", "benchmark"}, ModeLeaderboard},
		{[]string{"test", "benchmark", "leaderboard"}, ModeLeaderboard},
		{[]string{"leaderboard"}, ModeLeaderboard},
		{[]string{"profile.0", "profile.1"}, ModeProfile},
	} {
		r := &FullResult{Runs: map[string]EvalResult{}}
		for _, k := range tt.runs {
			r.Runs[k] = EvalResult{}
		}
		if got := r.ImpliedMode(); got != tt.want {
			t.Errorf("runs %v: %s, want %s", tt.runs, got, tt.want)
		}
	}
}

func TestParseMode(t *testing.T) {
	t.Parallel()
	for _, m := range Modes {
		if got, err := ParseMode(string(m)); err != nil || got != m {
			t.Errorf("ParseMode(%q) = %q, %v", m, got, err)
		}
	}
	for _, bad := range []string{"", "Test", "fast", " test"} {
		var me *ModeError
		if _, err := ParseMode(bad); !errors.As(err, &me) || me.Mode != bad {
			t.Errorf("ParseMode(%q): %v", bad, err)
		}
	}
}
