package main

import (
	"regexp"
	"testing"
)

// TestVersion: an unstamped build (the test binary) says dev, and the
// supported agent range is printed.
func TestVersion(t *testing.T) {
	r := runKbgen(t, nil, "", "version")
	want := regexp.MustCompile(`^kbgen dev \([^;]+; go1\.\d+[^,]*, linux/\w+\)\nsupports buildkite-agent >= v3\.50\.2 \(tested with v3\.52\.1\)\n$`)
	if r.code != 0 || !want.MatchString(r.stdout) {
		t.Fatalf("version: exit %d %q", r.code, r.stdout)
	}
}
