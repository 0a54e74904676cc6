package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDoctorOnThisMachine runs the real doctor on the build machine (no
// GPU here, maybe no cgroup v2 or docker): it must report failures line by
// line and exit 1, never crash. The installed-plan check runs against a
// staging root written by kbgen node install.
func TestDoctorOnThisMachine(t *testing.T) {
	fx := "../../golden/cli/fixtures/node-l40s"
	stage := t.TempDir()
	res := runKbgen(t, nil, "", "node", "install", "--sysfs", fx+"/sys", "--nvidia-smi", fx+"/nvidia-smi.csv",
		"--queue", "nvidia-l40s", "--root", stage)
	if res.code != 0 {
		t.Fatalf("install: %d %s", res.code, res.stderr)
	}
	res = runKbgen(t, nil, "", "doctor", "--root", stage, "--skip-containers")
	if res.code != 1 {
		t.Errorf("doctor exit %d, want 1 (this machine has no GPU)\n%s%s", res.code, res.stdout, res.stderr)
	}
	lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
	for _, l := range lines {
		if !strings.HasPrefix(l, "PASS  ") && !strings.HasPrefix(l, "FAIL  ") && !strings.HasPrefix(l, "SKIP  ") {
			t.Errorf("not a check line: %q", l)
		}
	}
	for _, want := range []string{
		"PASS  agents installed: 2 agents for queue nvidia-l40s",
		"FAIL  GPU driver: ",
		"FAIL  buildkite-agent-gpu@0.service: ",
		"SKIP  isolation gpu1: skipped",
	} {
		if !strings.Contains(res.stdout, want) {
			t.Errorf("doctor output lacks %q:\n%s", want, res.stdout)
		}
	}
	if !strings.Contains(res.stderr, "checks failed") {
		t.Errorf("stderr: %q", res.stderr)
	}
	// With nothing installed the report still has every check.
	res = runKbgen(t, nil, "", "doctor", "--root", filepath.Join(stage, "nothing"), "--skip-containers")
	if res.code != 1 || !strings.Contains(res.stdout, "FAIL  agents installed: no /etc/buildkite-agent/kbgen/plan.json") {
		t.Errorf("doctor on an empty root: %d\n%s", res.code, res.stdout)
	}
	if _, err := os.Stat(filepath.Join(stage, "nothing")); err == nil {
		t.Error("doctor wrote into the root")
	}
}

// TestDoctorHelpListsEveryCheck: every check kbgen doctor reports on a
// staged node is named in kbgen doctor --help (seven were missing).
func TestDoctorHelpListsEveryCheck(t *testing.T) {
	root := t.TempDir()
	if r := runKbgen(t, nil, "", "node", "install", "--queue", "h100", "--sysfs", "../../node/testdata/h100x8/sys", "--nvidia-smi", "../../node/testdata/h100x8/nvidia-smi.csv", "--root", root); r.code != 0 {
		t.Fatalf("staging a node: exit %d: %s", r.code, r.stderr)
	}
	out := runKbgen(t, nil, "", "doctor", "--root", root, "--skip-containers").stdout
	help := runKbgen(t, nil, "", "doctor", "--help").stdout
	line := regexp.MustCompile(`(?m)^(PASS|FAIL|SKIP)  (.+?): `)
	digits := regexp.MustCompile(`(@|gpu)\d+`)
	n := 0
	for _, m := range line.FindAllStringSubmatch(out, -1) {
		n++
		name := digits.ReplaceAllString(m[2], "${1}N")
		if !strings.Contains(help, name) {
			t.Errorf("check %q is not in kbgen doctor --help", name)
		}
	}
	if n < 10 {
		t.Fatalf("only %d checks in:\n%s", n, out)
	}
}
