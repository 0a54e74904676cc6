package steps

import (
	"fmt"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/size"
	"github.com/gpu-mode/kbgen/plugincfg"
)

// KubernetesPluginSource is the plugin name agent-stack-k8s reserves: the
// controller turns its podSpec into the Kubernetes Job that runs the step.
const KubernetesPluginSource = "kubernetes"

// GPU resource names of the NVIDIA and AMD device plugins.
const (
	NVIDIAGPUResource = "nvidia.com/gpu"
	AMDGPUResource    = "amd.com/gpu"
)

// Paths of the Kubernetes step. agent-stack-k8s mounts its workspace
// volume at /workspace in every container of the job's pod: the agent
// binary the publish runs, the agent's coordination socket (world-writable,
// unauthenticated: it takes log lines and exit statuses) and the hooks,
// plugins and build directories (agent-stack-k8s
// internal/controller/scheduler/scheduler.go; buildkite/agent
// kubernetes/runner.go).
const (
	KubernetesWorkspace = "/workspace"
	// KubernetesResults is where kbgen sandbox writes what it vouches
	// for, inside the workspace it makes root's alone.
	KubernetesResults = KubernetesWorkspace + "/kbgen-results"
)

// KubernetesCommand is the eval container's command, one shell line for
// the agent's bootstrap (agent-stack-k8s makes the container's command
// BUILDKITE_COMMAND and runs it with /bin/sh -ec as the container's user,
// root here). As the gpu-docker hook does on a node: kbgen sandbox runs
// `kbgen run` as an unprivileged uid with the process launcher and writes
// only what it vouches for; the root shell, which holds the agent's token,
// publishes that. The trap keeps the shell waiting on a cancel while the
// sandbox stops the runner and vouches for its cancelled result.
var KubernetesCommand = "trap : TERM INT; s=0; kbgen sandbox --launcher process --protect " + KubernetesWorkspace +
	" --out-dir " + KubernetesResults + " -- " + RunCommand + " || s=$?; if [ -f " + KubernetesResults + "/result.json ]; then kbgen run --publish " +
	KubernetesResults + "/result.json || cp " + KubernetesResults + "/result.json result.json; fi; exit $s"

// KubernetesPodSpec builds the `kubernetes` plugin config for a fleet on
// agent-stack-k8s. The scheduler does the placement the sandbox does on a
// docker node: the device plugin hands the pod whole GPUs, and equal
// integer CPU requests and limits give Guaranteed QoS, which the kubelet's
// static CPU manager turns into exclusive cores. What the pod spec cannot
// say (no network, the pids limit) is the cluster's job: see
// deployment/k8s and docs/isolation.md.
//
// The container runs as root with only CAP_SETUID, CAP_SETGID and
// CAP_KILL, so that `kbgen sandbox --launcher process` can start the
// runner as uid 1000 and signal it; the pod sets no runAsUser (with one,
// agent-stack-k8s chowns /workspace to that user) and keeps its own PID
// namespace (the sandbox kills what uid 1000 leaves behind).
func KubernetesPodSpec(c plugincfg.GPUDocker) (map[string]any, error) {
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
			"shareProcessNamespace":        false,
			"securityContext": map[string]any{
				"seccompProfile": map[string]any{"type": "RuntimeDefault"},
			},
			"containers": []any{map[string]any{
				"name":    "eval",
				"image":   c.Image,
				"command": []any{Escape(KubernetesCommand)},
				"resources": map[string]any{
					"requests": limits,
					"limits":   limits,
				},
				"securityContext": map[string]any{
					"runAsUser":                0,
					"runAsGroup":               0,
					"runAsNonRoot":             false,
					"allowPrivilegeEscalation": false,
					"readOnlyRootFilesystem":   true,
					"capabilities":             map[string]any{"drop": []any{"ALL"}, "add": []any{"SETUID", "SETGID", "KILL"}},
				},
				"volumeMounts": []any{
					map[string]any{"name": "dshm", "mountPath": "/dev/shm"},
					map[string]any{"name": "work", "mountPath": "/work"},
					map[string]any{"name": "tmp", "mountPath": "/tmp"},
				},
			}},
			"volumes": []any{
				map[string]any{"name": "dshm", "emptyDir": map[string]any{"medium": "Memory", "sizeLimit": shm.KubernetesQuantity()}},
				map[string]any{"name": "work", "emptyDir": map[string]any{}},
				map[string]any{"name": "tmp", "emptyDir": map[string]any{}},
			},
		},
	}, nil
}
