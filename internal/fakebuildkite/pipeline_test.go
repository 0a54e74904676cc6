package fakebuildkite

import (
	"reflect"
	"testing"
)

// TestParseSteps: the step fields the live server acts on, in each
// spelling YAML and the agent's JSON upload allow.
func TestParseSteps(t *testing.T) {
	for _, tc := range []struct {
		name string
		src  string
		env  map[string]string
		want []stepSpec
	}{
		{
			name: "routing, retry rules, priority as a string, timeout, artifact paths",
			src: `steps:
  - key: eval
    command: kbgen run
    agents: {queue: "${Q:-default}"}
    priority: "5"
    timeout_in_minutes: 20
    artifact_paths: "result.json;profile_data/**/*"
    retry:
      automatic:
        - {exit_status: -1, limit: 2}
        - {exit_status: [75, 255], limit: 1}
        - {exit_status: "*"}
`,
			env: map[string]string{"Q": "nvidia-h100"},
			want: []stepSpec{{key: "eval", label: "kbgen run", command: "kbgen run", env: map[string]string{}, queue: "nvidia-h100",
				priority: 5, timeoutMinutes: 20, artifactPaths: []string{"result.json", "profile_data/**/*"},
				retry: []retryRule{{exits: []int{-1}, limit: 2}, {exits: []int{75, 255}, limit: 1}, {anyExit: true, limit: 2}}}},
		},
		{
			name: "wait, depends_on as a string and as a list of maps, agents as a list, retry automatic true",
			src: `env: {A: "1"}
steps:
  - key: a
    command: "true"
    agents: ["queue=cpu"]
  - wait
  - key: b
    command: "true"
    depends_on: a
    retry: {automatic: true}
  - key: c
    command: "true"
    depends_on: [{step: a}, b]
    env: {A: "2"}
`,
			want: []stepSpec{
				{key: "a", label: "true", command: "true", env: map[string]string{"A": "1"}, queue: "cpu"},
				{key: "b", label: "true", command: "true", env: map[string]string{"A": "1"}, queue: "default", afterWait: true,
					dependsOn: []string{"a"}, retry: []retryRule{{anyExit: true, limit: 2}}},
				{key: "c", label: "true", command: "true", env: map[string]string{"A": "2"}, queue: "default", afterWait: true,
					dependsOn: []string{"a", "b"}},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseSteps([]byte(tc.src), tc.env)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// TestParseStepsRefuses: what the local server cannot run is an error,
// not a silently dropped step.
func TestParseStepsRefuses(t *testing.T) {
	for _, src := range []string{
		"steps:\n  - block: release\n",
		"steps:\n  - trigger: other\n",
		"steps:\n  - command: x\n    priority: high\n",
		"steps:\n  - command: x\n    depends_on: [{}]\n",
		"steps: [",
	} {
		if _, err := parseSteps([]byte(src), map[string]string{}); err == nil {
			t.Errorf("parseSteps(%q) = nil error", src)
		}
	}
}

func TestRetryRuleMatches(t *testing.T) {
	r := retryRule{exits: []int{-1, 75}}
	for code, want := range map[int]bool{-1: true, 75: true, 0: false, 1: false} {
		if r.matches(code) != want {
			t.Errorf("matches(%d) = %v", code, !want)
		}
	}
	if !(retryRule{anyExit: true}).matches(3) {
		t.Error("exit_status * must match any status")
	}
}
