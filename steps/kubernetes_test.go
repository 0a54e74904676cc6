package steps

import (
	"reflect"
	"testing"

	"github.com/gpu-mode/kbgen/internal/contract"
)

func TestKubernetesQuantity(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"64g": "64Gi", "512m": "512Mi", "8k": "8Ki", "1024": "1024", "100b": "100", "2G": "2Gi"} {
		got, err := kubernetesQuantity(in)
		if err != nil || got != want {
			t.Errorf("%q → %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "g", "1.5g", "12t", "x1g"} {
		if got, err := kubernetesQuantity(bad); err == nil {
			t.Errorf("%q accepted as %q", bad, got)
		}
	}
}

func TestKubernetesPodSpecIsGuaranteedQoS(t *testing.T) {
	t.Parallel()
	for runtime, gpuRes := range map[contract.Runtime]string{contract.RuntimeNVIDIA: NVIDIAGPUResource, contract.RuntimeROCm: AMDGPUResource} {
		spec, err := KubernetesPodSpec(GPUDockerConfig{Image: "img:1", Runtime: runtime, GPUs: 1, CPUs: 8, Memory: "64g", ShmSize: "16g", PidsLimit: 4096, Network: "none"})
		if err != nil {
			t.Fatal(err)
		}
		pod := spec["podSpec"].(map[string]any)
		c := pod["containers"].([]any)[0].(map[string]any)
		res := c["resources"].(map[string]any)
		if !reflect.DeepEqual(res["requests"], res["limits"]) {
			t.Errorf("%s: requests %v != limits %v (not Guaranteed QoS)", runtime, res["requests"], res["limits"])
		}
		lim := res["limits"].(map[string]any)
		if lim[gpuRes] != 1 || lim["cpu"] != "8" || lim["memory"] != "64Gi" {
			t.Errorf("%s: limits %v", runtime, lim)
		}
		if pod["automountServiceAccountToken"] != false {
			t.Error("service account token mounted into the submission's pod")
		}
		if caps := c["securityContext"].(map[string]any)["capabilities"].(map[string]any)["drop"]; !reflect.DeepEqual(caps, []any{"ALL"}) {
			t.Errorf("capabilities not dropped: %v", caps)
		}
	}
	if _, err := KubernetesPodSpec(GPUDockerConfig{Memory: "lots", ShmSize: "1g"}); err == nil {
		t.Error("bad memory accepted")
	}
}
