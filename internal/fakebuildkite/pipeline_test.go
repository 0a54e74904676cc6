package fakebuildkite

import (
	"encoding/json"
	"os"
	"reflect"
	"testing"

	"github.com/gpu-mode/kbgen/steps"
	"gopkg.in/yaml.v3"
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
			for i := range got {
				if !json.Valid(got[i].step) {
					t.Errorf("step %d: the job's step JSON %q", i, got[i].step)
				}
				got[i].step = nil
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

// TestRetryRuleMatches: one rule's conditions, as retry.md defines them.
func TestRetryRuleMatches(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, rule  string
		code        int
		sig, reason string
		want        bool
	}{
		{"listed exit", `{exit_status: [-1, 75]}`, 75, "", "", true},
		{"unlisted exit", `{exit_status: [-1, 75]}`, 1, "", "", false},
		{"star matches 1 to 255", `{exit_status: "*"}`, 255, "", "", true},
		{"star never matches 0", `{exit_status: "*"}`, 0, "", "", false},
		{"star never matches a lost agent's -1", `{exit_status: "*"}`, -1, "", "", false},
		{"reason none, none given", `{exit_status: -1, signal_reason: none}`, -1, "", "", true},
		{"reason none, job refused", `{exit_status: -1, signal_reason: none}`, -1, "", "agent_refused", false},
		{"reason listed", `{exit_status: -1, signal_reason: [agent_refused, stack_error]}`, -1, "", "stack_error", true},
		{"reason star", `{exit_status: -1, signal_reason: "*"}`, -1, "", "signature_rejected", true},
		{"signal without SIG, any case", `{exit_status: 143, signal: sigterm}`, 143, "SIGTERM", "cancel", true},
		{"signal differs", `{exit_status: 143, signal: KILL}`, 143, "SIGTERM", "cancel", false},
		{"signal none", `{exit_status: 75, signal: none}`, 75, "", "", true},
		{"signal none, signaled", `{exit_status: 75, signal: none}`, 75, "SIGKILL", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rules, err := parseSteps([]byte("steps:\n  - command: x\n    retry: {automatic: "+tc.rule+"}\n"), nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := rules[0].retry[0].matches(tc.code, tc.sig, tc.reason); got != tc.want {
				t.Errorf("%s matches(%d, %q, %q) = %v, want %v", tc.rule, tc.code, tc.sig, tc.reason, got, tc.want)
			}
		})
	}
}

// TestRetryRulesRefused: rules Buildkite would not accept.
func TestRetryRulesRefused(t *testing.T) {
	t.Parallel()
	for _, rule := range []string{
		`{exit_status: -1, signal_reason: agent_lost}`, // not a Buildkite value: a lost agent has none
		`{exit_status: -1, limit: 11}`,
		`{exit_status: 256}`,
		`{exit_status: -2}`,
	} {
		if _, err := parseSteps([]byte("steps:\n  - command: x\n    retry: {automatic: "+rule+"}\n"), nil); err == nil {
			t.Errorf("rule %s accepted", rule)
		}
	}
}

// TestInfraRetryRules: the rules kbgen emits (the eval step's
// steps.InfraRetry and the bootstrap step of .buildkite/pipeline.yml),
// applied as Buildkite applies them, first match wins: the
// infrastructure's faults are retried twice, a timed-out job, one that
// never ran and a user's failure never.
func TestInfraRetryRules(t *testing.T) {
	t.Parallel()
	evalYAML, err := yaml.Marshal(map[string]any{"steps": []any{map[string]any{"command": "x", "retry": steps.InfraRetry()}}})
	if err != nil {
		t.Fatal(err)
	}
	bootstrap, err := os.ReadFile("../../.buildkite/pipeline.yml")
	if err != nil {
		t.Fatal(err)
	}
	for _, src := range []struct {
		name string
		yml  []byte
	}{{"eval", evalYAML}, {"bootstrap", bootstrap}} {
		specs, err := parseSteps(src.yml, map[string]string{})
		if err != nil {
			t.Fatal(err)
		}
		rules := specs[0].retry
		for _, tc := range []struct {
			name        string
			code        int
			sig, reason string
			retries     int
		}{
			{"lost agent", -1, "", "", 2},
			{"this machine at fault (75)", 75, "", "", 2},
			{"agent or container engine failed (255)", 255, "", "", 2},
			{"timed out: the sandbox stopped with 75", 75, "SIGTERM", "cancel", 0},
			{"timed out: killed", -1, "SIGKILL", "cancel", 0},
			{"timed out: 143", 143, "", "cancel", 0},
			{"timed out: the agent reports 255", 255, "", "cancel", 0},
			{"signature rejected", -1, "", "signature_rejected", 0},
			{"pre-bootstrap hook refused", -1, "", "agent_refused", 0},
			{"agent incompatible", -1, "", "agent_incompatible", 0},
			{"process did not start", -1, "", "process_run_error", 0},
			{"stack error", -1, "", "stack_error", 0},
			{"bad job (65)", 65, "", "", 0},
			{"failure (1)", 1, "", "", 0},
		} {
			t.Run(src.name+"/"+tc.name, func(t *testing.T) {
				used := make([]int, len(rules))
				n := 0
				for ; n < 10; n++ {
					rule, ok := retryBy(rules, used, tc.code, tc.sig, tc.reason)
					if !ok {
						break
					}
					used[rule]++
				}
				if n != tc.retries {
					t.Errorf("exit %d signal %q reason %q: retried %d times, want %d", tc.code, tc.sig, tc.reason, n, tc.retries)
				}
			})
		}
	}
}
