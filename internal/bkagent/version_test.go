package bkagent

import (
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"
)

func TestCheckVersion(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		out  string
		want string
		old  bool
	}{
		{"buildkite-agent version 3.52.1, build x", "3.52.1", false},
		{"buildkite-agent version 3.50.2, build 1", "3.50.2", false},
		{"buildkite-agent version 3.100.0, build 1", "3.100.0", false},
		{"buildkite-agent version 3.50.1, build 1", "3.50.1", true},
		{"buildkite-agent version 3.50.0", "3.50.0", true},
		{"buildkite-agent version 2.6.10", "2.6.10", true},
		{"3.52.1", "3.52.1", false},
	} {
		t.Run(tc.out, func(t *testing.T) {
			v, err := ParseVersion(tc.out)
			if err != nil || v.String() != tc.want {
				t.Fatalf("ParseVersion = %v, %v; want %s", v, err, tc.want)
			}
			err = CheckVersion(v)
			var old *OldAgentError
			if errors.As(err, &old) != tc.old || (tc.old && old.Version != v) || (!tc.old && err != nil) {
				t.Fatalf("CheckVersion(%s) = %v, want too old: %v", v, err, tc.old)
			}
			// The message is the contract: the operator reads why and what to install.
			if tc.old && !strings.Contains(err.Error(), "older than "+MinVersion+": a running job would never see a cancel or its timeout; install "+TestedVersion) {
				t.Errorf("CheckVersion(%s) = %v, want it to say why and what to install", v, err)
			}
		})
	}
	if _, err := ParseVersion("command not found"); err == nil {
		t.Error("ParseVersion of no version: nil error")
	}
}

// TestVersionsAgreeEverywhere: setup-node.sh and CI install and require
// the versions this package names (one definition, copied where a shell
// script cannot import it).
func TestVersionsAgreeEverywhere(t *testing.T) {
	t.Parallel()
	for _, f := range []struct{ path, re, want string }{
		{"../../deployment/setup-node.sh", `(?m)^agent_version=(\S+)$`, TestedVersion},
		{"../../deployment/setup-node.sh", `(?m)^agent_min=(\S+)$`, MinVersion},
		{"../../.ci/run", `agent/v3@v(\S+)`, TestedVersion},
	} {
		b, err := os.ReadFile(f.path)
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(f.re).FindSubmatch(b)
		if m == nil || string(m[1]) != f.want {
			t.Errorf("%s: %s finds %q, want %s", f.path, f.re, m, f.want)
		}
	}
}
