package signing

import (
	"strings"
	"testing"

	"github.com/gpu-mode/kbgen/internal/contract"
)

func TestCheckQueueBinding(t *testing.T) {
	for _, tt := range []struct {
		name string
		env  map[string]string
		want string // "" for ok, else part of the error
	}{
		{"same queue", map[string]string{contract.EnvQueue: "nvidia-h100", contract.EnvAgentQueue: "nvidia-h100"}, ""},
		{"re-routed", map[string]string{contract.EnvQueue: "nvidia-h100", contract.EnvAgentQueue: "amd-mi300"}, `for queue "nvidia-h100" but runs on an agent of queue "amd-mi300"`},
		{"agent on default queue", map[string]string{contract.EnvQueue: "nvidia-h100"}, `agent of queue "default"`},
		{"default both", map[string]string{contract.EnvQueue: "default"}, ""},
		{"no step queue", map[string]string{contract.EnvAgentQueue: "nvidia-h100"}, "names no queue"},
		{"empty step queue", map[string]string{contract.EnvQueue: "", contract.EnvAgentQueue: ""}, "names no queue"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckQueueBinding(func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok })
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("want ok, got %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("want error with %q, got %v", tt.want, err)
			}
		})
	}
}
