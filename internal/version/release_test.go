package version

import "testing"

// TestRelease: the release back out of String's line, and other text kept.
//
// Not parallel: String() reads the package variables TestFill rewrites.
func TestRelease(t *testing.T) {
	for in, want := range map[string]string{
		String(): Version,
		"kbgen v1.2.0 (abc, 2026; go1.26, linux/arm64)":                 "v1.2.0",
		"kbgen dev (unknown commit, unknown date; go1.26, linux/amd64)": Dev,
		"v1.1.0": "v1.1.0",
		"":       "",
	} {
		if got := Release(in); got != want {
			t.Errorf("Release(%q) = %q, want %q", in, got, want)
		}
	}
}
