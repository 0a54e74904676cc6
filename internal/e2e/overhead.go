package e2e

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Phase is one stretch of a job as the agent ran it.
type Phase struct {
	Name string
	Took time.Duration
}

// phaseMarks are the log lines that open each phase, in order. The agent
// stamps every line it streams with its time (_bk;t=<unix ms>).
var phaseMarks = []struct{ name, mark string }{
	{"environment hook", "~~~ Running global environment hook"},
	{"checkout", "~~~ Preparing working directory"},
	{"post-checkout hook (pin plugin)", "~~~ Running global post-checkout hook"},
	{"plugin hook, kbgen sandbox, docker start", "~~~ Running plugin gpu-docker command hook"},
	{"evaluation (kbgen run)", "kbgen run: "},
	// From the runner's last line to the sandbox's verdict: the container
	// exits, docker removes it (docker run --rm returns only then), the
	// sandbox verifies the sealed result and scans the host once more.
	{"container exit and removal, vouch", "kbgen run: wrote "},
	// kbgen run --publish keeps the agent's output to itself: the artifact
	// upload, annotation and meta-data, and the hook's end, are one phase.
	{"hook's publish", "kbgen sandbox: the result sealed by kbgen run verifies"},
	{"artifact_paths upload", "~~~ Uploading artifacts"},
	{"bootstrap command (kbgen generate --upload)", "~~~ Running commands"},
}

var stamped = regexp.MustCompile(`_bk;t=(\d{13})`)

// Phases splits a job's log into phases by its time stamps: accepted →
// first line is the agent starting the job, the last line → finished is
// the agent finishing it. Phases whose mark the log lacks are left out.
func Phases(log string, accepted, finished time.Time) []Phase {
	type mark struct {
		name string
		at   time.Time
	}
	marks := []mark{{"agent: accept → job process", accepted}}
	seen := map[string]bool{}
	var last time.Time
	for _, line := range strings.Split(log, "\n") {
		m := stamped.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		ms, _ := strconv.ParseInt(m[1], 10, 64)
		at := time.UnixMilli(ms)
		last = at
		if len(marks) == 1 && marks[0].name == "agent: accept → job process" && !seen["first"] {
			seen["first"] = true
			marks = append(marks, mark{"(job start)", at})
		}
		for _, pm := range phaseMarks {
			if !seen[pm.name] && strings.Contains(line, pm.mark) {
				seen[pm.name] = true
				marks = append(marks, mark{pm.name, at})
				break
			}
		}
	}
	if !last.IsZero() {
		marks = append(marks, mark{"agent: last line → finish", last})
	}
	marks = append(marks, mark{"", finished})
	var out []Phase
	for i := 0; i+1 < len(marks); i++ {
		name := marks[i].name
		if name == "(job start)" {
			name = "agent: job start → first hook"
		}
		out = append(out, Phase{name, marks[i+1].at.Sub(marks[i].at)})
	}
	return out
}

// FormatPhases is a table of phases and their total.
func FormatPhases(ps []Phase) string {
	var b strings.Builder
	var total time.Duration
	for _, p := range ps {
		fmt.Fprintf(&b, "  %-45s %6.2f s\n", p.Name, p.Took.Seconds())
		total += p.Took
	}
	fmt.Fprintf(&b, "  %-45s %6.2f s\n", "total (accept → finish)", total.Seconds())
	return b.String()
}
