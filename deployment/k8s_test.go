package deployment

import (
	"os"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/gpu-mode/kbgen/registry"
)

// TestK8sValues keeps the agent-stack-k8s example pointed at a queue the
// registry routes to Kubernetes, with verification on and no token inline.
func TestK8sValues(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("k8s/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		AgentToken       string `yaml:"agentToken"`
		AgentStackSecret string `yaml:"agentStackSecret"`
		Config           struct {
			Tags        []string       `yaml:"tags"`
			MaxInFlight int            `yaml:"max-in-flight"`
			AgentConfig map[string]any `yaml:"agent-config"`
		} `yaml:"config"`
	}
	if err := yaml.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	if v.AgentToken != "" || v.AgentStackSecret == "" {
		t.Errorf("the token must come from a secret: agentToken %q, agentStackSecret %q", v.AgentToken, v.AgentStackSecret)
	}
	if v.Config.MaxInFlight <= 0 {
		t.Error("max-in-flight unset: every waiting job would become a Pending pod")
	}
	if v.Config.AgentConfig["verification-failure-behavior"] != "block" || v.Config.AgentConfig["verification-jwks-file"] == nil {
		t.Errorf("signed-pipeline verification not configured: %v", v.Config.AgentConfig)
	}
	reg, err := registry.Load("")
	if err != nil {
		t.Fatal(err)
	}
	var queues []string
	for _, tag := range v.Config.Tags {
		if q, ok := strings.CutPrefix(tag, "queue="); ok {
			queues = append(queues, q)
		}
	}
	if len(queues) != 1 {
		t.Fatalf("want one queue tag, got %v", v.Config.Tags)
	}
	vendor, err := reg.Lookup(queues[0])
	if err != nil {
		t.Fatal(err)
	}
	if vendor.Backend != registry.BackendKubernetes {
		t.Errorf("queue %s has backend %q in the registry, want kubernetes", queues[0], vendor.Backend)
	}

	np, err := os.ReadFile("k8s/networkpolicy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var pol map[string]any
	if err := yaml.Unmarshal(np, &pol); err != nil || pol["kind"] != "NetworkPolicy" {
		t.Errorf("networkpolicy.yaml: %v %v", err, pol["kind"])
	}
}
