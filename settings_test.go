package kbgen

import (
	"bytes"
	"os"
	"reflect"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/steps"
)

// settingsStep is the bootstrap as the settings file writes it.
type settingsStep struct {
	Key     string `yaml:"key"`
	Command string `yaml:"command"`
	Agents  struct {
		Queue string `yaml:"queue"`
	} `yaml:"agents"`
	Timeout int `yaml:"timeout_in_minutes"`
	Retry   struct {
		Automatic []steps.AutomaticRetry `yaml:"automatic"`
	} `yaml:"retry"`
}

// TestPipelineSettings: the settings steps are one definition. The
// embedded copy is the file; docs/buildkite-setup.md prints it verbatim
// (the operator pastes it); its bootstrap runs kbgen generate on
// contract.ControlQueue with the eval step's infrastructure retries.
func TestPipelineSettings(t *testing.T) {
	t.Parallel()
	file, err := os.ReadFile(".buildkite/pipeline-settings.yml")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("docs/buildkite-setup.md")
	if err != nil {
		t.Fatal(err)
	}
	var parsed struct{ Steps []settingsStep }
	if err := yaml.Unmarshal(file, &parsed); err != nil {
		t.Fatal(err)
	}
	var want []steps.AutomaticRetry
	for _, c := range exitcode.InfraRetryCodes {
		want = append(want, steps.AutomaticRetry{ExitStatus: c, SignalReason: steps.SignalReasonNone, Limit: steps.RetryLimit})
	}
	step := settingsStep{}
	if len(parsed.Steps) == 1 {
		step = parsed.Steps[0]
	}
	tests := []struct {
		name string
		ok   bool
	}{
		{"embedded is the file", bytes.Equal(PipelineSettings, file)},
		{"buildkite-setup.md prints it verbatim", bytes.Contains(doc, append([]byte("```yaml\n"), append(file, "```"...)...))},
		{"one step", len(parsed.Steps) == 1},
		{"the bootstrap key", step.Key == contract.BootstrapStepKey},
		{"kbgen generate --upload", step.Command == "kbgen generate --upload"},
		{"on the control queue", step.Agents.Queue == contract.ControlQueue},
		{"a timeout", step.Timeout > 0},
		{"the eval step's infrastructure retries", reflect.DeepEqual(step.Retry.Automatic, want)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if !tt.ok {
				t.Errorf("not so:\n%s", file)
			}
		})
	}
}
