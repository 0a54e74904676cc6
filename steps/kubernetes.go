package steps

import (
	"fmt"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/size"
)

// KubernetesPluginSource is the plugin name agent-stack-k8s reserves: the
// controller turns its podSpec into the Kubernetes Job that runs the step.
const KubernetesPluginSource = "kubernetes"

// GPU resource names of the NVIDIA and AMD device plugins.
const (
	NVIDIAGPUResource = "nvidia.com/gpu"
	AMDGPUResource    = "amd.com/gpu"
)

// KubernetesPodSpec builds the `kubernetes` plugin config for a fleet on
// agent-stack-k8s. The scheduler does the placement the sandbox does on a
// docker node: the device plugin hands the pod whole GPUs, and equal
// integer CPU requests and limits give Guaranteed QoS, which the kubelet's
// static CPU manager turns into exclusive cores. What the pod spec cannot
// say (no network, the pids limit) is the cluster's job: see
// deployment/k8s and docs/isolation.md.
func KubernetesPodSpec(c GPUDockerConfig) (map[string]any, error) {
	gpuResource := NVIDIAGPUResource
	if c.Runtime == contract.RuntimeROCm {
		gpuResource = AMDGPUResource
	}
	memory, err := size.Parse(c.Memory)
	if err != nil {
		return nil, fmt.Errorf("memory: %w", err)
	}
	shm, err := size.Parse(c.ShmSize)
	if err != nil {
		return nil, fmt.Errorf("shm-size: %w", err)
	}
	limits := map[string]any{"cpu": fmt.Sprint(c.CPUs), "memory": memory.KubernetesQuantity(), gpuResource: c.GPUs}
	return map[string]any{
		"checkout": map[string]any{"skip": true},
		"podSpec": map[string]any{
			"automountServiceAccountToken": false,
			"enableServiceLinks":           false,
			"securityContext": map[string]any{
				"runAsNonRoot":   true,
				"runAsUser":      1000,
				"seccompProfile": map[string]any{"type": "RuntimeDefault"},
			},
			"containers": []any{map[string]any{
				"name":    "eval",
				"image":   c.Image,
				"command": []any{RunCommand},
				"resources": map[string]any{
					"requests": limits,
					"limits":   limits,
				},
				"securityContext": map[string]any{
					"allowPrivilegeEscalation": false,
					"readOnlyRootFilesystem":   true,
					"capabilities":             map[string]any{"drop": []any{"ALL"}},
				},
				"volumeMounts": []any{
					map[string]any{"name": "dshm", "mountPath": "/dev/shm"},
					map[string]any{"name": "work", "mountPath": "/work"},
				},
			}},
			"volumes": []any{
				map[string]any{"name": "dshm", "emptyDir": map[string]any{"medium": "Memory", "sizeLimit": shm.KubernetesQuantity()}},
				map[string]any{"name": "work", "emptyDir": map[string]any{}},
			},
		},
	}, nil
}
