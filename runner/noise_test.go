package runner

import (
	"strings"
	"sync"
	"testing"

	"github.com/gpu-mode/kbgen/payload"
)

// bracketLog records the noise observer's calls.
type bracketLog struct {
	mu    sync.Mutex
	calls []string
}

func (b *bracketLog) Begin(run string) {
	b.mu.Lock()
	b.calls = append(b.calls, "begin "+run)
	b.mu.Unlock()
}
func (b *bracketLog) End(run string) {
	b.mu.Lock()
	b.calls = append(b.calls, "end "+run)
	b.mu.Unlock()
}

// TestNoiseBracketsOnlyTimedRuns: the noise record surrounds the harness of
// each benchmark and leaderboard run, never a test run, a warm-up or a
// profile.
func TestNoiseBracketsOnlyTimedRuns(t *testing.T) {
	needPython(t)
	for _, tc := range []struct {
		mode payload.Mode
		want string
	}{
		{payload.ModeTest, ""},
		{payload.ModeBenchmark, "begin benchmark,end benchmark"},
		{payload.ModeLeaderboard, "begin benchmark,end benchmark,begin leaderboard,end leaderboard"},
		{payload.ModePrivate, "begin benchmark,end benchmark,begin leaderboard,end leaderboard"},
	} {
		t.Run(string(tc.mode), func(t *testing.T) {
			log := &bracketLog{}
			res, err := evaluate(t, example(t, "vectoradd", "submission", tc.mode), func(o *EvalOptions) { o.Noise = log })
			if err != nil || !res.Success {
				t.Fatalf("runner failed: %v", err)
			}
			if got := strings.Join(log.calls, ","); got != tc.want {
				t.Errorf("observer calls %q, want %q", got, tc.want)
			}
		})
	}
}
