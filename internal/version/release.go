package version

import "strings"

// Release is the release in a line String printed ("kbgen v1.2.0 (…)" →
// "v1.2.0"), or s itself when it is not such a line: the run facts carry
// String's line, and two kbgens of one release built for two
// architectures are the same release.
func Release(s string) string {
	rest, ok := strings.CutPrefix(strings.TrimSpace(s), "kbgen ")
	if !ok {
		return strings.TrimSpace(s)
	}
	v, _, _ := strings.Cut(rest, " ")
	return v
}
