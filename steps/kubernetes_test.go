package steps

import (
	"reflect"
	"testing"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/plugincfg"
)

// TestKubernetesQuantities: the pod spec's sizes are the registry's, read
// by internal/size as the sandbox reads them (1.5g and 2t included, which
// an older converter of its own refused) and written in Kubernetes' units.
func TestKubernetesQuantities(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, memory, shm, wantMemory, wantShm string }{
		{"gibibytes", "64g", "16g", "64Gi", "16Gi"},
		{"fraction", "1.5g", "512m", "1536Mi", "512Mi"},
		{"tebibytes and bytes", "2t", "1048576b", "2Ti", "1Mi"},
		{"docker's other spellings", "64GiB", "8 gb", "64Gi", "8Gi"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			spec, err := KubernetesPodSpec(plugincfg.GPUDocker{Image: "img:1", GPUs: 1, CPUs: 1, Memory: tt.memory, ShmSize: tt.shm})
			if err != nil {
				t.Fatal(err)
			}
			pod := spec["podSpec"].(map[string]any)
			lim := pod["containers"].([]any)[0].(map[string]any)["resources"].(map[string]any)["limits"].(map[string]any)
			shm := pod["volumes"].([]any)[0].(map[string]any)["emptyDir"].(map[string]any)["sizeLimit"]
			if lim["memory"] != tt.wantMemory || shm != tt.wantShm {
				t.Errorf("memory %v, shm %v; want %s, %s", lim["memory"], shm, tt.wantMemory, tt.wantShm)
			}
		})
	}
}

func TestKubernetesPodSpecIsGuaranteedQoS(t *testing.T) {
	t.Parallel()
	for runtime, gpuRes := range map[contract.Runtime]string{contract.RuntimeNVIDIA: NVIDIAGPUResource, contract.RuntimeROCm: AMDGPUResource} {
		spec, err := KubernetesPodSpec(plugincfg.GPUDocker{Image: "img:1", Runtime: runtime, GPUs: 1, CPUs: 8, Memory: "64g", ShmSize: "16g", PidsLimit: 4096, Network: "none"})
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
	if _, err := KubernetesPodSpec(plugincfg.GPUDocker{Memory: "lots", ShmSize: "1g"}); err == nil {
		t.Error("bad memory accepted")
	}
}

// TestKubernetesPodSpecRunsTheSandbox: the eval container is root with
// only the capabilities the process launcher uses, the pod sets no user
// (agent-stack-k8s would chown /workspace to it) and keeps its own PID
// namespace, and the command is the sandbox's, escaped for the upload.
func TestKubernetesPodSpecRunsTheSandbox(t *testing.T) {
	t.Parallel()
	spec, err := KubernetesPodSpec(plugincfg.GPUDocker{Image: "img:1", Runtime: contract.RuntimeNVIDIA, GPUs: 1, CPUs: 8, Memory: "64g", ShmSize: "16g"})
	if err != nil {
		t.Fatal(err)
	}
	pod := spec["podSpec"].(map[string]any)
	c := pod["containers"].([]any)[0].(map[string]any)
	sc := c["securityContext"].(map[string]any)
	tests := []struct {
		name      string
		got, want any
	}{
		{"capabilities added", sc["capabilities"].(map[string]any)["add"], []any{"SETUID", "SETGID", "KILL"}},
		{"container user", sc["runAsUser"], 0},
		{"no privilege escalation (no_new_privs)", sc["allowPrivilegeEscalation"], false},
		{"no pod-level user", pod["securityContext"].(map[string]any)["runAsUser"], nil},
		{"own PID namespace", pod["shareProcessNamespace"], false},
		{"command", c["command"], []any{Escape(KubernetesCommand)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !reflect.DeepEqual(tt.got, tt.want) {
				t.Errorf("got %#v, want %#v", tt.got, tt.want)
			}
		})
	}
}
