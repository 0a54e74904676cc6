package pipelinegen

import (
	"maps"
	"strings"
	"testing"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/payload"
	"github.com/gpu-mode/kbgen/registry"
)

// TestTargetAgent: KBGEN_TARGET_AGENT pins the eval step to one agent by
// its kbgen-agent tag beside the queue (a canary, a re-measurement); a
// name that is not one is the job's fault.
func TestTargetAgent(t *testing.T) {
	t.Parallel()
	reg, err := registry.Load("")
	if err != nil {
		t.Fatal(err)
	}
	in := exampleIn(t, payload.ModeBenchmark)
	for _, tc := range []struct {
		name, agent string
		want        map[string]any
		refused     bool // a job error at KBGEN_TARGET_AGENT
	}{
		{name: "any agent of the queue", want: map[string]any{"queue": "nvidia-h100"}},
		{name: "one agent", agent: "gpu-node-7-gpu3", want: map[string]any{"queue": "nvidia-h100", contract.AgentTag: "gpu-node-7-gpu3"}},
		{name: "a tag list is not a name", agent: "x,queue=other", refused: true},
		{name: "an interpolation is not a name", agent: "$BUILDKITE_AGENT_NAME", refused: true},
		{name: "too long", agent: strings.Repeat("a", 129), refused: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := map[string]string{contract.EnvPayload: in.Encoded, contract.EnvQueue: "h100", contract.EnvPriority: "-100"}
			if tc.agent != "" {
				env[contract.EnvTargetAgent] = tc.agent
			}
			p, _, err := FromBuild(reg, Build{Lookup: contract.MapLookup(env)}, Options{})
			if tc.refused {
				if !isFieldError(err, contract.EnvTargetAgent) {
					t.Fatalf("error %v, want a job error at %s", err, contract.EnvTargetAgent)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			step := evalOf(t, p)
			got, _ := step.RemainingFields["agents"].(map[string]any)
			if !maps.Equal(got, tc.want) {
				t.Errorf("agents %v, want %v", got, tc.want)
			}
			if pr := step.RemainingFields["priority"]; pr != contract.PriorityLowest {
				t.Errorf("priority %v, want %d", pr, contract.PriorityLowest)
			}
		})
	}
}
