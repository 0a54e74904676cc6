package version

import (
	"runtime/debug"
	"strings"
	"testing"
)

// TestFill checks what each source of a version wins over: -ldflags over
// build info, build info over "dev".
func TestFill(t *testing.T) {
	t.Parallel()
	vcs := []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.time", Value: "2026-11-24T12:00:00Z"}}
	for _, tc := range []struct {
		name                      string
		stamped                   [3]string // Version, Commit, Date from -ldflags
		bi                        debug.BuildInfo
		wantV, wantC, wantD, want string
	}{
		{name: "test binary", bi: debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, wantV: Dev,
			want: "kbgen dev (unknown commit, unknown date; go"},
		{name: "go install at a tag", bi: debug.BuildInfo{Main: debug.Module{Version: "v1.2.0"}}, wantV: "v1.2.0"},
		{name: "go build in a checkout", bi: debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs},
			wantV: Dev, wantC: "abc123", wantD: "2026-11-24T12:00:00Z", want: "kbgen dev (abc123, 2026-11-24T12:00:00Z; go"},
		{name: "release stamp wins", stamped: [3]string{"v1.3.0", "fff", "2026-12-01T00:00:00Z"},
			bi:    debug.BuildInfo{Main: debug.Module{Version: "v1.2.0"}, Settings: vcs},
			wantV: "v1.3.0", wantC: "fff", wantD: "2026-12-01T00:00:00Z", want: "kbgen v1.3.0 (fff, 2026-12-01T00:00:00Z; go"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Not parallel: the package variables are the subject.
			saved := [3]string{Version, Commit, Date}
			defer func() { Version, Commit, Date = saved[0], saved[1], saved[2] }()
			Version, Commit, Date = tc.stamped[0], tc.stamped[1], tc.stamped[2]
			fill(&tc.bi)
			if Version != tc.wantV || Commit != tc.wantC || Date != tc.wantD {
				t.Fatalf("got %q %q %q, want %q %q %q", Version, Commit, Date, tc.wantV, tc.wantC, tc.wantD)
			}
			if tc.want != "" && !strings.HasPrefix(String(), tc.want) {
				t.Errorf("String() = %q, want prefix %q", String(), tc.want)
			}
		})
	}
}

func TestAgentRange(t *testing.T) {
	t.Parallel()
	if got, want := AgentRange(), "buildkite-agent >= v3.50.2 (tested with v3.52.1)"; got != want {
		t.Fatalf("AgentRange() = %q, want %q", got, want)
	}
}
