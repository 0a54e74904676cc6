package pipelinegen

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/buildkite/go-pipeline"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/payload"
	"github.com/gpu-mode/kbgen/plugincfg"
	"github.com/gpu-mode/kbgen/registry"
	"github.com/gpu-mode/kbgen/signing"
	"github.com/gpu-mode/kbgen/steps"
)

// loneDollar finds a run of an odd number of `$`: text the agent's
// interpolation would read as a variable rather than a literal `$`.
var dollarRun = regexp.MustCompile(`\$+`)

// FuzzGenerate: every string of a job that reaches the generator (the run
// id, user, image and priority from the build env, and the whole job
// config from the payload) is hostile. Whatever they hold, Generate either
// refuses with a one-line error or emits a pipeline that go-pipeline parses
// back to the same steps, holding exactly the one eval step the generator
// means: its command, one gpu-docker plugin with the vendor's limits, and
// only the KERNELBOT_QUEUE / KERNELBOT_RUN_ID env; no unescaped `$`
// anywhere; and it signs and verifies.
func FuzzGenerate(f *testing.F) {
	var configs [][]byte
	for _, m := range payload.Modes {
		in, err := ExampleJob(m)
		if err != nil {
			f.Fatal(err)
		}
		js, err := json.Marshal(in.Config)
		if err != nil {
			f.Fatal(err)
		}
		configs = append(configs, js)
	}
	hostile := `{"lang":"py","mode":"leaderboard","main":"eval.py","multi_gpu":true,"ranked_timeout":86400,` +
		`"sources":{"eval.py":"$BUILDKITE_AGENT_ACCESS_TOKEN","submission.py":"\n- command: x"},` +
		`"tests":[{"n":"$(id)"}],"benchmarks":[{"n":"${HOME}"}],"x-unknown":{"steps":[{"command":"curl x | sh"}]}}`
	configs = append(configs, []byte(hostile))
	for i, s := range [][4]string{
		{"golden-run", "alice", "", ""},
		{adversarialText, adversarialText, "", "5"},
		{"${BUILDKITE_AGENT_ACCESS_TOKEN}", "$(id)", "evil/image:latest", "-100"},
		{"a\nsteps:\n  - command: curl x | sh", "bob\x00", "ghcr.io/x/y@sha256:" + strings.Repeat("a", 64), "101"},
		{"'\"\\ \t#&*!|>%@`", "u", "img\nplugins: [evil]", "1e3"},
		{"\xff\xfe", "\u2028", "", "+7"},
		{"$", "$$$", "$IMAGE", "$P"},
	} {
		f.Add(s[0], s[1], s[2], s[3], configs[i%len(configs)], uint8(i*3))
	}

	reg, err := registry.Load("")
	if err != nil {
		f.Fatal(err)
	}
	key, keys := testKeys(f, signing.DefaultAlgorithm)

	examples := map[payload.Mode]*payload.Input{}
	for _, m := range payload.Modes {
		if examples[m], err = ExampleJob(m); err != nil {
			f.Fatal(err)
		}
	}

	f.Fuzz(func(t *testing.T, runID, user, image, priority string, config []byte, queue uint8) {
		v := reg.Vendors[int(queue)%len(reg.Vendors)]
		in, err := payload.ParseInput(config)
		if err != nil {
			// Most mutations of a config are not a valid job (payload's
			// fuzz targets cover those refusals). Use the bytes as a
			// submission instead, so every input still reaches Generate.
			base := examples[payload.Modes[int(queue)%len(payload.Modes)]]
			cfg := *base.Config
			cfg.Sources = map[string]string{"submission.py": string(config)}
			for k, s := range base.Config.Sources {
				if k != "submission.py" {
					cfg.Sources[k] = s
				}
			}
			in = &payload.Input{Config: &cfg, Encoded: base.Encoded}
		}
		job := Job{Input: in, RunID: runID, Queue: v.Queue, Image: image, Priority: priority, User: user}

		p, err := Generate(job, v, Options{})
		if err != nil {
			// One line is the contract: the bootstrap step's log prints it as it is.
			if strings.ContainsAny(err.Error(), "\n\r") {
				t.Fatalf("error spans lines: %q", err)
			}
			return
		}
		doc, err := Marshal(p)
		if err != nil {
			t.Fatalf("accepted job does not marshal: %v", err)
		}
		back, err := Parse(doc)
		if err != nil {
			t.Fatalf("generated YAML does not parse: %v\n%s", err, doc)
		}
		a, _ := json.Marshal(p)
		b, _ := json.Marshal(back)
		if !bytes.Equal(a, b) {
			t.Fatalf("YAML round trip changed the pipeline:\nmeant  %s\nparsed %s", a, b)
		}
		checkOnlyTheEvalStep(t, back, v, job)

		for _, run := range dollarRun.FindAllString(string(doc), -1) {
			if len(run)%2 == 1 {
				t.Fatalf("unescaped $ in the pipeline:\n%s", doc)
			}
		}
		up, err := AsUploaded(back)
		if err != nil {
			t.Fatalf("pipeline needs the uploader's env: %v", err)
		}
		if got := evalOf(t, up).Env[contract.EnvRunID]; runID != "" && got != asUTF8(runID) {
			t.Fatalf("run id after the agent's interpolation: %q, want %q", got, runID)
		}

		if err := Sign(context.Background(), back, key, testRepo); err != nil {
			t.Fatalf("accepted job does not sign: %v", err)
		}
		signed, _ := Marshal(back)
		sp, err := Parse(signed)
		if err != nil {
			t.Fatal(err)
		}
		if err := Verify(context.Background(), sp, keys, testRepo); err != nil {
			t.Fatalf("signed pipeline does not verify: %v", err)
		}
	})
}

// asUTF8 is s as it survives YAML: each byte that is not UTF-8 becomes
// U+FFFD. (Buildkite's API is JSON, so a real build env cannot even carry
// such a run id; only a local `kbgen generate` can see one.)
func asUTF8(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		b.WriteRune(r) // RuneError for a bad byte, n == 1
		i += n
	}
	return b.String()
}

// evalStepFields are the only top-level keys the eval step may have.
var evalStepFields = []string{"agents", "artifact_paths", "concurrency", "concurrency_group", "priority", "retry", "timeout_in_minutes"}

func checkOnlyTheEvalStep(t *testing.T, p *pipeline.Pipeline, v *registry.Vendor, job Job) {
	t.Helper()
	if len(p.Steps) != 1 || p.Env != nil && p.Env.Len() > 0 || len(p.RemainingFields) > 0 {
		t.Fatalf("pipeline has %d steps, env %v, extra %v", len(p.Steps), p.Env, p.RemainingFields)
	}
	s, ok := p.Steps[0].(*pipeline.CommandStep)
	if !ok || s.Key != contract.EvalStepKey || s.Command != steps.RunCommand {
		t.Fatalf("the step is not the eval step: %#v", p.Steps[0])
	}
	if s.Matrix != nil || len(s.Secrets) > 0 || !s.Checkout.IsEmpty() {
		t.Fatalf("payload text added a matrix, secrets or checkout: %#v", s)
	}
	for k := range s.RemainingFields {
		if !slices.Contains(evalStepFields, k) {
			t.Fatalf("payload text added step field %q", k)
		}
	}
	if q := stepQueue(s); q != v.Queue {
		t.Fatalf("step routed to %q, want %q", q, v.Queue)
	}
	for k := range s.Env {
		if k == contract.EnvNoisePolicy && v.Noise != nil && s.Env[k] == v.Noise.String() {
			continue // the vendor's, not the payload's
		}
		if k != contract.EnvQueue && k != contract.EnvRunID {
			t.Fatalf("payload text added env %q", k)
		}
	}
	if s.Env[contract.EnvQueue] != v.Queue {
		t.Fatalf("env queue %q", s.Env[contract.EnvQueue])
	}
	if v.Backend == registry.BackendKubernetes {
		// The pod spec is built from the same config; its limits are pinned
		// by steps' tests and the golden pipelines.
		k8s := (&pipeline.Plugin{Source: steps.KubernetesPluginSource}).FullSource()
		if len(s.Plugins) != 1 || s.Plugins[0].Source != k8s {
			t.Fatalf("plugins: %#v", s.Plugins)
		}
		return
	}
	if len(s.Plugins) != 1 || s.Plugins[0].Source != plugincfg.Source {
		t.Fatalf("plugins: %#v", s.Plugins)
	}
	cfg, ok := s.Plugins[0].Config.(map[string]any)
	if !ok {
		t.Fatalf("plugin config is %T", s.Plugins[0].Config)
	}
	b, _ := json.Marshal(cfg)
	var got plugincfg.GPUDocker
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("plugin config has keys the generator does not write: %v (%s)", err, b)
	}
	wantImage := v.Image
	if job.Image != "" {
		wantImage = job.Image
	}
	if got.Image != wantImage || got.Runtime != v.Runtime || got.CPUs != v.Resources.CPUs ||
		got.Memory != v.Resources.Memory || got.ShmSize != v.Resources.ShmSize ||
		got.PidsLimit != v.Resources.PidsLimit || got.Network != "none" || got.GPUs < 1 || got.GPUs > v.Resources.GPUs {
		t.Fatalf("plugin config %+v is not the vendor's limits", got)
	}
}

// FuzzVerify is the vendor agent's side: whatever pipeline YAML arrives
// (a compromised backend can send anything), Verify never panics, and it
// accepts a command step only if the fields the signature covers are
// exactly what kbgen signed. The fuzzer mutates a signed pipeline, so it
// explores changes to signed and unsigned fields alike.
func FuzzVerify(f *testing.F) {
	key, keys := testKeys(f, signing.DefaultAlgorithm)
	in, err := ExampleJob(payload.ModeLeaderboard)
	if err != nil {
		f.Fatal(err)
	}
	reg, _ := registry.Load("")
	v, _ := reg.Lookup("nvidia-h100")
	p, err := Generate(Job{Input: in, RunID: "run-$$1", Queue: v.Queue}, v, Options{})
	if err != nil {
		f.Fatal(err)
	}
	if err := Sign(context.Background(), p, key, testRepo); err != nil {
		f.Fatal(err)
	}
	doc, _ := Marshal(p)
	up, err := AsUploaded(p)
	if err != nil {
		f.Fatal(err)
	}
	signedStep, err := EvalStep(up)
	if err != nil {
		f.Fatal(err)
	}
	want := signedFieldsJSON(f, signedStep)

	f.Add(string(doc))
	f.Add(strings.Replace(string(doc), "kbgen run", "kbgen run; id", 1))
	f.Add(strings.Replace(string(doc), "network: none", "network: host", 1))
	f.Add(strings.Replace(string(doc), "steps:\n", "steps:\n  - command: id\n    signature: {algorithm: EdDSA, signed_fields: [command], value: x}\n", 1))
	f.Add(strings.Replace(string(doc), "queue: nvidia-h100", "queue: amd-mi300", 1))
	f.Add(string(doc) + "env:\n  LD_PRELOAD: /x.so\n")
	f.Add("steps:\n  - wait\n")
	f.Fuzz(func(t *testing.T, yml string) {
		p, err := Parse([]byte(yml))
		if err != nil {
			return
		}
		if Verify(context.Background(), p, keys, testRepo) != nil {
			return
		}
		up, err := AsUploaded(p)
		if err != nil {
			t.Fatalf("Verify accepted a pipeline AsUploaded refuses: %v", err)
		}
		forEachCommandStep(up.Steps, func(s *pipeline.CommandStep) {
			if got := signedFieldsJSON(t, s); got != want {
				t.Fatalf("verified a step whose signed fields changed:\n got %s\nwant %s", got, want)
			}
			if stepQueue(s) != v.Queue {
				t.Fatalf("verified a step re-routed to %q", stepQueue(s))
			}
		})
		if p.Env != nil && p.Env.Len() > 0 {
			t.Fatalf("verified a pipeline that added pipeline env %v", p.Env.ToMap())
		}
	})
}

func forEachCommandStep(ss pipeline.Steps, fn func(*pipeline.CommandStep)) {
	for _, s := range ss {
		switch s := s.(type) {
		case *pipeline.CommandStep:
			fn(s)
		case *pipeline.GroupStep:
			forEachCommandStep(s.Steps, fn)
		}
	}
}

// signedFieldsJSON is what the signature covers, after the agent's
// interpolation, as canonical-enough JSON to compare.
func signedFieldsJSON(t testing.TB, s *pipeline.CommandStep) string {
	t.Helper()
	env := s.Env
	if len(env) == 0 {
		env = nil
	}
	b, err := json.Marshal(map[string]any{
		"command": s.Command, "env": env, "plugins": s.Plugins, "matrix": s.Matrix, "secrets": s.Secrets,
	})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
