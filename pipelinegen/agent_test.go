package pipelinegen

import (
	"encoding/json"
	"github.com/gpu-mode/kbgen/internal/bkagent"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpu-mode/kbgen/internal/contract"
)

// agentBinary finds the real buildkite-agent (bkagent.Installed), or skips.
func agentBinary(t *testing.T) string {
	t.Helper()
	p, err := bkagent.Installed(os.Getenv)
	if err != nil {
		t.Skipf("SKIP: %v; the agent dry-run of golden pipelines was not run", err)
	}
	return p
}

const plantedToken = "bkua_planted_secret_0123456789"

// TestAgentDryRunMatchesIntent runs the real `buildkite-agent pipeline
// upload --dry-run` on every golden pipeline, with agent secrets planted in
// its environment, and checks that what the agent would upload is exactly
// what kbgen meant: the pipeline with `$$` unescaped and nothing expanded.
func TestAgentDryRunMatchesIntent(t *testing.T) {
	t.Parallel()
	agent := agentBinary(t)
	files, _ := filepath.Glob(filepath.Join(goldenDir, "*", "*.yml"))
	files = append(files, filepath.Join(goldenDir, "adversarial.yml"))
	home := t.TempDir()
	for _, f := range files {
		t.Run(strings.TrimPrefix(f, goldenDir+"/"), func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(agent, "pipeline", "upload", "--dry-run", "--format", "yaml", f)
			cmd.Env = []string{
				"PATH=" + os.Getenv("PATH"),
				"HOME=" + home,
				"BUILDKITE_AGENT_ACCESS_TOKEN=" + plantedToken,
				"BUILDKITE_PIPELINE_DEFAULT_BRANCH=main",
			}
			var stderr strings.Builder
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("agent refused %s: %v\n%s", f, err, stderr.String())
			}
			if strings.Contains(string(out), plantedToken) || strings.Contains(string(out), home) {
				t.Fatalf("agent interpolation expanded a secret into the pipeline:\n%s", out)
			}
			agentView, err := Parse(out)
			if err != nil {
				t.Fatalf("agent output does not parse: %v\n%s", err, out)
			}
			data, _ := os.ReadFile(f)
			intended, err := Parse(data)
			if err != nil {
				t.Fatal(err)
			}
			// With an empty env, interpolation only turns $$ into $; any
			// unescaped $VAR would become "" here but the secret in the agent.
			if err := intended.Interpolate(nil, false); err != nil {
				t.Fatal(err)
			}
			a, _ := json.Marshal(agentView)
			b, _ := json.Marshal(intended)
			if string(a) != string(b) {
				t.Errorf("agent would upload something else than kbgen meant:\nagent:  %s\nintent: %s", a, b)
			}
		})
	}
}

// TestAdversarialRunIDSurvivesVerbatim: after the agent's interpolation the
// eval step's env holds the hostile run id byte for byte, and the pipeline
// still has exactly one step.
func TestAdversarialRunIDSurvivesVerbatim(t *testing.T) {
	t.Parallel()
	agent := agentBinary(t)
	cmd := exec.Command(agent, "pipeline", "upload", "--dry-run", "--format", "yaml", filepath.Join(goldenDir, "adversarial.yml"))
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=/root", "BUILDKITE_AGENT_ACCESS_TOKEN=" + plantedToken}
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	p, err := Parse(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Steps) != 1 {
		t.Fatalf("hostile text changed the number of steps to %d", len(p.Steps))
	}
	s, err := EvalStep(p)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Env[contract.EnvRunID]; got != adversarialText {
		t.Errorf("run id after interpolation:\n got %q\nwant %q", got, adversarialText)
	}
	// KERNELBOT_QUEUE, KERNELBOT_RUN_ID and the queue's noise policy.
	if len(s.Plugins) != 1 || len(s.Env) != 3 {
		t.Errorf("hostile text added plugins or env: %d plugins, env %v", len(s.Plugins), s.Env)
	}
}

// TestBootstrapPipeline: the repo's .buildkite/pipeline.yml, as the agent
// uploads it, runs `kbgen generate --upload` on the job's queue, or on the
// default queue for a build with no job.
func TestBootstrapPipeline(t *testing.T) {
	t.Parallel()
	agent := agentBinary(t)
	for _, tt := range []struct{ queue, bootstrap, want string }{
		{"nvidia-h100", "", "nvidia-h100"},
		{"", "", "default"},
		{"nvidia-h100", "kernelbot-control", "kernelbot-control"},
	} {
		queue, want := tt.queue, tt.want
		cmd := exec.Command(agent, "pipeline", "upload", "--dry-run", "--format", "yaml", "../.buildkite/pipeline.yml")
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=/root"}
		if queue != "" {
			cmd.Env = append(cmd.Env, contract.EnvQueue+"="+queue)
		}
		if tt.bootstrap != "" {
			cmd.Env = append(cmd.Env, contract.EnvBootstrapQueue+"="+tt.bootstrap)
		}
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("agent refused .buildkite/pipeline.yml: %v", err)
		}
		p, err := Parse(out)
		if err != nil {
			t.Fatal(err)
		}
		var found bool
		for _, s := range p.Steps {
			cs, ok := s.(interface{ MarshalJSON() ([]byte, error) })
			if !ok {
				continue
			}
			b, _ := cs.MarshalJSON()
			var step struct {
				Key     string            `json:"key"`
				Command string            `json:"command"`
				Agents  map[string]string `json:"agents"`
			}
			_ = json.Unmarshal(b, &step)
			if step.Key == "bootstrap" {
				found = true
				if step.Agents["queue"] != want {
					t.Errorf("queue %q: bootstrap runs on %q, want %q", queue, step.Agents["queue"], want)
				}
				if !strings.Contains(step.Command, "kbgen generate --upload") {
					t.Errorf("bootstrap command %q", step.Command)
				}
			}
		}
		if !found {
			t.Fatal("no bootstrap step")
		}
	}
}
