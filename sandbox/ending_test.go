package sandbox

import "testing"

// TestOOMEvent: the engine's answer is one {{.Action}} a line; only a
// whole "oom" line is an OOM kill.
func TestOOMEvent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		out  string
		want bool
	}{
		{"one oom event", "oom\n", true},
		{"an oom among others", "die\noom\n", true},
		{"no event", "", false},
		{"another action naming oom", "oom-score-adjusted\n", false},
		{"a word within a line", "not oom\n", false},
	} {
		if got := oomEvent([]byte(tc.out)); got != tc.want {
			t.Errorf("%s: oomEvent(%q) = %v, want %v", tc.name, tc.out, got, tc.want)
		}
	}
}
