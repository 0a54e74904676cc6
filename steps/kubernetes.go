package steps

import (
	"fmt"
	"strings"

	"github.com/gpu-mode/kbgen/internal/contract"
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
	memory, err := kubernetesQuantity(c.Memory)
	if err != nil {
		return nil, fmt.Errorf("memory: %w", err)
	}
	shm, err := kubernetesQuantity(c.ShmSize)
	if err != nil {
		return nil, fmt.Errorf("shm-size: %w", err)
	}
	limits := map[string]any{"cpu": fmt.Sprint(c.CPUs), "memory": memory, gpuResource: c.GPUs}
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
				map[string]any{"name": "dshm", "emptyDir": map[string]any{"medium": "Memory", "sizeLimit": shm}},
				map[string]any{"name": "work", "emptyDir": map[string]any{}},
			},
		},
	}, nil
}

// kubernetesQuantity turns a docker size ("64g", "512m") into a Kubernetes
// binary quantity ("64Gi", "512Mi"); both mean powers of 1024.
func kubernetesQuantity(size string) (string, error) {
	if size == "" {
		return "", fmt.Errorf("empty size")
	}
	unit := size[len(size)-1]
	num := strings.TrimRight(size, "bkmgBKMG")
	suffix, ok := map[byte]string{'k': "Ki", 'm': "Mi", 'g': "Gi", 'b': ""}[unit|0x20]
	if unit >= '0' && unit <= '9' {
		suffix, ok, num = "", true, size
	}
	if !ok || num == "" || strings.Trim(num, "0123456789") != "" {
		return "", fmt.Errorf("%q is not a size like 64g", size)
	}
	return num + suffix, nil
}
