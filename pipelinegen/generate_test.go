package pipelinegen

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/buildkite/go-pipeline"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/payload"
	"github.com/gpu-mode/kbgen/plugincfg"
	"github.com/gpu-mode/kbgen/registry"
	"github.com/gpu-mode/kbgen/steps"
)

func mustVendor(t *testing.T, q string) *registry.Vendor {
	t.Helper()
	reg, err := registry.Load("")
	if err != nil {
		t.Fatal(err)
	}
	v, err := reg.Lookup(q)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func exampleIn(t *testing.T, mode payload.Mode) *payload.Input {
	t.Helper()
	in, err := ExampleJob(mode)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

func evalOf(t *testing.T, p *pipeline.Pipeline) *pipeline.CommandStep {
	t.Helper()
	s, err := EvalStep(p)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestStepTimeout(t *testing.T) {
	t.Parallel()
	v := mustVendor(t, "nvidia-h100")
	// Each run costs 120 s of warm-up/compile plus its mode timeout; the
	// sum is rounded up to minutes and the vendor's 5 start-up minutes added.
	tests := []struct {
		mode                 payload.Mode
		testT, benchT, rankT int
		want                 int
	}{
		{payload.ModeTest, 0, 0, 0, 10},              // 300 s → 5
		{payload.ModeTest, 60, 0, 0, 8},              // 180 s → 3
		{payload.ModeBenchmark, 60, 300, 0, 12},      // 420 s → 7
		{payload.ModeLeaderboard, 0, 0, 0, 20},       // 3 × 300 s → 15
		{payload.ModePrivate, 10, 20, 30, 12},        // 360 + 60 s → 7
		{payload.ModeProfile, 0, 61, 0, 9},           // 181 s → 4
		{payload.ModeLeaderboard, 600, 600, 600, 41}, // 3 × 720 s → 36
	}
	for _, tt := range tests {
		c := *exampleIn(t, tt.mode).Config
		c.TestTimeout, c.BenchmarkTimeout, c.RankedTimeout = tt.testT, tt.benchT, tt.rankT
		got, err := StepTimeoutMinutes(&c, v)
		if err != nil || got != tt.want {
			t.Errorf("%s %d/%d/%d: got %d (%v), want %d", tt.mode, tt.testT, tt.benchT, tt.rankT, got, err, tt.want)
		}
	}
	c := *exampleIn(t, payload.ModeLeaderboard).Config
	c.RankedTimeout = 3600
	if _, err := StepTimeoutMinutes(&c, v); err == nil || !payload.IsJobError(err) {
		t.Errorf("a job over the vendor's max must be refused as a job error, got %v", err)
	}
}

func TestPriority(t *testing.T) {
	t.Parallel()
	v := mustVendor(t, "amd-mi300")
	for _, tt := range []struct {
		mode     payload.Mode
		override string
		want     int
		wantErr  bool
	}{
		{payload.ModeTest, "", PriorityDefault, false},
		{payload.ModeBenchmark, "", PriorityDefault, false},
		{payload.ModeLeaderboard, "", PriorityRanked, false},
		{payload.ModePrivate, "", PriorityRanked, false},
		{payload.ModeTest, "7", 7, false},
		{payload.ModeLeaderboard, "-3", -3, false},
		{payload.ModeTest, "high", 0, true},
		{payload.ModeTest, "1000", 0, true},
	} {
		p, err := Generate(Job{Input: exampleIn(t, tt.mode), Priority: tt.override}, v, Options{})
		if tt.wantErr {
			if !isFieldError(err, contract.EnvPriority) {
				t.Errorf("%s %q: want error naming %s, got %v", tt.mode, tt.override, contract.EnvPriority, err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if got := evalOf(t, p).RemainingFields["priority"]; got != tt.want {
			t.Errorf("%s %q: priority %v, want %d", tt.mode, tt.override, got, tt.want)
		}
	}
}

func TestEvalStepShape(t *testing.T) {
	t.Parallel()
	for _, q := range []string{"nvidia-b200", "amd-mi355x"} {
		v := mustVendor(t, q)
		p, err := Generate(Job{Input: exampleIn(t, payload.ModeTest), RunID: "r1", User: "alice"}, v, Options{})
		if err != nil {
			t.Fatal(err)
		}
		s := evalOf(t, p)
		if s.Command != steps.RunCommand || s.Key != contract.EvalStepKey {
			t.Errorf("%s: command %q key %q", q, s.Command, s.Key)
		}
		emoji := map[contract.Runtime]string{contract.RuntimeNVIDIA: ":nvidia:", contract.RuntimeROCm: ":amd:"}[v.Runtime]
		if !strings.HasPrefix(s.Label, emoji) {
			t.Errorf("%s: label %q lacks %s", q, s.Label, emoji)
		}
		cfg := s.Plugins[0].Config.(map[string]any)
		if cfg["runtime"] != string(v.Runtime) || cfg["network"] != "none" || cfg["image"] != v.Image || cfg["gpus"] != 1 {
			t.Errorf("%s: plugin config %v", q, cfg)
		}
		if s.Plugins[0].Source != plugincfg.Source {
			t.Errorf("plugin source %q", s.Plugins[0].Source)
		}
		if got := s.RemainingFields["agents"].(map[string]any)["queue"]; got != v.Queue {
			t.Errorf("agents queue %v", got)
		}
		if got := s.RemainingFields["concurrency_group"]; got != "kernelbot/"+q+"/user/alice" {
			t.Errorf("concurrency group %v", got)
		}
		r := s.RemainingFields["retry"].(steps.Retry)
		codes := map[int]bool{}
		for _, a := range r.Automatic {
			codes[a.ExitStatus] = true
			if a.Limit < 1 || a.Limit > 3 {
				t.Errorf("retry limit %d unbounded", a.Limit)
			}
			if a.SignalReason != steps.SignalReasonNone {
				t.Errorf("retry rule for %d: signal_reason %q, want none (a timed-out or refused job is never retried)", a.ExitStatus, a.SignalReason)
			}
		}
		if !codes[-1] || !codes[255] || !codes[75] || len(codes) != 3 || codes[0] || codes[1] {
			t.Errorf("retry codes %v: want exactly -1, 255, 75", codes)
		}
	}
}

func TestAliasRoutesToCanonicalQueue(t *testing.T) {
	t.Parallel()
	v := mustVendor(t, "mi300")
	p, err := Generate(Job{Input: exampleIn(t, payload.ModeTest), Queue: "mi300"}, v, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := evalOf(t, p).RemainingFields["agents"].(map[string]any)["queue"]; got != "amd-mi300" {
		t.Errorf("alias routed to %v", got)
	}
}

func TestUntrustedStringsEscaped(t *testing.T) {
	t.Parallel()
	v := mustVendor(t, "nvidia-h100")
	evil := "$BUILDKITE_AGENT_ACCESS_TOKEN ${HOME} $(id)"
	p, err := Generate(Job{Input: exampleIn(t, payload.ModeTest), RunID: evil, User: evil}, v, Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := evalOf(t, p)
	if got := s.Env[contract.EnvRunID]; got != "$$BUILDKITE_AGENT_ACCESS_TOKEN $${HOME} $$(id)" {
		t.Errorf("run id env not escaped: %q", got)
	}
	if !strings.Contains(s.Label, "$$BUILDKITE") {
		t.Errorf("label not escaped: %q", s.Label)
	}
	if g := s.RemainingFields["concurrency_group"].(string); strings.Contains(g, "$") || !strings.Contains(g, "sha256-") {
		t.Errorf("user not hashed into the concurrency group: %q", g)
	}
	for _, bad := range []string{"Evil/$(id)", "img:1; rm -rf /", "a b"} {
		if _, err := Generate(Job{Input: exampleIn(t, payload.ModeTest), Image: bad}, v, Options{}); err == nil {
			t.Errorf("image %q accepted", bad)
		}
	}
}

// TestShapeRefusals: a job goes only to a queue of its shape, and the
// refusal (65, a payload.Error) names the queue that would take it.
func TestShapeRefusals(t *testing.T) {
	t.Parallel()
	oneGPU := func(m payload.Mode) func(*testing.T) *payload.Input {
		return func(t *testing.T) *payload.Input { return exampleIn(t, m) }
	}
	multi := func(queue string, m payload.Mode, edit func(*payload.Config)) func(*testing.T) *payload.Input {
		return func(t *testing.T) *payload.Input {
			in, err := ExampleJobFor(mustVendor(t, queue), m)
			if err != nil {
				t.Fatal(err)
			}
			c := *in.Config
			if edit != nil {
				edit(&c)
			}
			return &payload.Input{Config: &c, Encoded: in.Encoded}
		}
	}
	worldSize := func(n string) func(*payload.Config) {
		return func(c *payload.Config) {
			c.Benchmarks = append(slices.Clone(c.Benchmarks), payload.Case{{Key: "world_size", Value: payload.StringScalar(n)}})
		}
	}
	// wantErr is text because the message is the contract: it tells the
	// submitter which queue to use instead and why.
	tests := []struct {
		name, queue string
		job         func(*testing.T) *payload.Input
		field       string   // the payload.Error's Field; "": accepted
		wantErr     []string // all in the message
		wantGPUs    int
	}{
		{"multi-GPU job on a one-GPU queue", "nvidia-h100", multi("nvidia-h100x8", payload.ModeTest, nil), "multi_gpu", []string{"multiple GPUs", "use nvidia-h100x8"}, 0},
		{"multi-GPU job on an AMD one-GPU queue", "mi300", multi("amd-mi300x8", payload.ModeLeaderboard, nil), "multi_gpu", []string{"multiple GPUs", "use amd-mi300x8"}, 0},
		{"multi-GPU job where no shape has more", "nvidia-b200", multi("nvidia-h100x8", payload.ModeTest, nil), "multi_gpu", []string{"multiple GPUs"}, 0},
		{"one-GPU job on an 8-GPU queue", "h100x8", oneGPU(payload.ModeTest), "multi_gpu", []string{"only multi_gpu jobs", "7 idle", "use nvidia-h100 or nvidia-h100-mig or nebius-h100"}, 0},
		{"one-GPU job on an L4x4 queue", "l4x4", oneGPU(payload.ModeLeaderboard), "multi_gpu", []string{"only multi_gpu jobs", "use nvidia-l4"}, 0},
		{"one-GPU job on an MI300x8 queue", "mi300x8", oneGPU(payload.ModeTest), "multi_gpu", []string{"use amd-mi300"}, 0},
		{"world_size beyond the queue", "l4x4", multi("nvidia-l4x4", payload.ModeTest, worldSize("8")), "benchmarks", []string{"benchmarks", "world_size 8", "4 GPUs"}, 0},
		{"world_size not a number", "l4x4", multi("nvidia-l4x4", payload.ModeTest, worldSize("two")), "benchmarks", []string{`world_size "two"`}, 0},
		{"ranked job on a MIG queue", "h100-mig", oneGPU(payload.ModeLeaderboard), "mode", []string{"runs only test jobs", "use nvidia-h100 or nebius-h100"}, 0},
		{"benchmark on a MIG queue", "nvidia-h100-mig", oneGPU(payload.ModeBenchmark), "mode", []string{"runs only test jobs"}, 0},
		{"ncu profile on a multi-GPU queue", "h100x8", multi("nvidia-h100x8", payload.ModeProfile, nil), "multi_gpu", []string{"ncu"}, 0},
		{"test on a MIG queue", "h100-mig", oneGPU(payload.ModeTest), "", nil, 1},
		{"multi-GPU test on h100x8", "h100x8", multi("nvidia-h100x8", payload.ModeTest, nil), "", nil, 8},
		{"multi-GPU ranked on mi300x8", "mi300x8", multi("amd-mi300x8", payload.ModeLeaderboard, nil), "", nil, 8},
		{"rocprofv3 profile on mi300x8", "mi300x8", multi("amd-mi300x8", payload.ModeProfile, nil), "", nil, 8},
		{"world_size 2 on l4x4", "l4x4", multi("nvidia-l4x4", payload.ModeTest, worldSize("2")), "", nil, 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			eval, err := EvalFor(Job{Input: tc.job(t)}, mustVendor(t, tc.queue), Options{})
			if tc.field == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if eval.Plugin.GPUs != tc.wantGPUs {
					t.Errorf("gpus %d, want %d", eval.Plugin.GPUs, tc.wantGPUs)
				}
				return
			}
			if !isFieldError(err, tc.field) {
				t.Fatalf("want a payload.Error (exit 65) at %s, got %v", tc.field, err)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

func TestNoJobPipelineParses(t *testing.T) {
	t.Parallel()
	doc, err := Marshal(NoJobPipeline())
	if err != nil {
		t.Fatal(err)
	}
	p, err := Parse(doc)
	if err != nil || len(p.Steps) != 1 {
		t.Fatalf("no-job pipeline: %v %v", p, err)
	}
	if _, err := EvalStep(p); err == nil {
		t.Error("no-job pipeline has an eval step")
	}
}

func TestRunIDMustBeUTF8(t *testing.T) {
	t.Parallel()
	v := mustVendor(t, "nvidia-h100")
	for field, job := range map[string]Job{contract.EnvRunID: {RunID: "run-\xff"}, contract.EnvUser: {User: "u\xfe"}} {
		job.Input = exampleIn(t, payload.ModeTest)
		if _, err := Generate(job, v, Options{}); !isFieldError(err, field) {
			t.Errorf("%+v: want a payload.Error for %s, got %v", job, field, err)
		}
	}
}

// TestEvalForIsWhatGenerateEmits: the typed eval step (what kbgen local
// runs under) and the emitted step agree on queue, timeout and priority.
func TestEvalForIsWhatGenerateEmits(t *testing.T) {
	t.Parallel()
	reg, err := registry.Load("")
	if err != nil {
		t.Fatal(err)
	}
	v, err := reg.LookupOrFirst("")
	if err != nil || v.Queue != reg.Queues()[0] {
		t.Fatalf("LookupOrFirst(\"\") = %v, %v", v, err)
	}
	in, err := ExampleJob(payload.ModeLeaderboard)
	if err != nil {
		t.Fatal(err)
	}
	job := Job{Input: in, RunID: "r1", Queue: v.Queue, Priority: "7"}
	e, err := EvalFor(job, v, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := StepTimeoutMinutes(in.Config, v)
	if e.Queue != v.Queue || e.TimeoutMinutes != want || e.Timeout() != time.Duration(want)*time.Minute || e.Priority != 7 {
		t.Errorf("EvalFor: queue %q timeout %d (%s) priority %d", e.Queue, e.TimeoutMinutes, e.Timeout(), e.Priority)
	}
	p, err := Generate(job, v, Options{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := EvalStep(p)
	if err != nil {
		t.Fatal(err)
	}
	if s.RemainingFields["timeout_in_minutes"] != e.TimeoutMinutes || s.RemainingFields["priority"] != e.Priority ||
		s.RemainingFields["agents"].(map[string]any)["queue"] != e.Queue {
		t.Errorf("emitted %v, planned %+v", s.RemainingFields, e)
	}
}

// isFieldError reports whether err is a refused job (payload.Error, exit
// 65) that names field.
func isFieldError(err error, field string) bool {
	var pe *payload.Error
	return errors.As(err, &pe) && pe.Kind == payload.KindInvalidField && pe.Field == field
}
