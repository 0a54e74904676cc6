package kernelbot

import (
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/gpu-mode/kbgen/registry"
)

// TestPatchIsFresh fails when kernelbot.patch is not what the registry and
// tree/ make now: a queue was added, or the launcher changed, and nobody
// ran go generate.
func TestPatchIsFresh(t *testing.T) {
	t.Parallel()
	reg, err := registry.Load("")
	if err != nil {
		t.Fatal(err)
	}
	want, err := Patch(reg)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(PatchFile)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Fatalf("%s is stale: run `go generate ./integrations/kernelbot` and commit it", PatchFile)
	}
}

// TestDocsListEveryGPU fails when docs/backend.md's table of Buildkite
// GPUs is not the enum the patch adds (go generate rewrites it).
func TestDocsListEveryGPU(t *testing.T) {
	t.Parallel()
	reg, err := registry.Load("")
	if err != nil {
		t.Fatal(err)
	}
	gpus, err := GPUs(reg)
	if err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile(DocsFile)
	if err != nil {
		t.Fatal(err)
	}
	want, err := DocsTable(string(page), gpus)
	if err != nil {
		t.Fatal(err)
	}
	if string(page) != want {
		t.Fatalf("%s's table of Buildkite GPUs is stale: run `go generate ./integrations/kernelbot`", DocsFile)
	}
}

func TestGPUs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		yaml    string
		want    []BuildkiteGPU
		wantErr string
	}{
		{
			name: "one per queue, a donor's prefix kept as Kernelbot's B200_Nebius",
			yaml: vendor("nvidia-h100", "H100", 1, `"90a"`) + vendor("nebius-h100", "H100", 1, `"90a"`) + vendor("amd-mi300", "MI300X", 1, "null"),
			want: []BuildkiteGPU{{"H100_BK", "nvidia-h100", "90a"}, {"H100_Nebius_BK", "nebius-h100", "90a"}, {"MI300_BK", "amd-mi300", ""}},
		},
		{
			name: "multi-GPU queues keep Kernelbot's lower-case xN",
			yaml: vendor("amd-mi300", "MI300X", 1, "null") + vendor("amd-mi300x8", "MI300X", 8, "null") + vendor("nvidia-l4x4", "L4", 4, `"89"`),
			want: []BuildkiteGPU{{"MI300_BK", "amd-mi300", ""}, {"MI300x8_BK", "amd-mi300x8", ""}, {"L4x4_BK", "nvidia-l4x4", "89"}},
		},
		{
			name: "a queue name that is no Python identifier",
			yaml: vendor("acme-h100.k8s", "H100", 1, `"90a"`) + vendor("nvidia-h100-mig", "H100", 1, `"90a"`),
			want: []BuildkiteGPU{{"H100_K8S_Acme_BK", "acme-h100.k8s", "90a"}, {"H100_MIG_BK", "nvidia-h100-mig", "90a"}},
		},
		{
			name:    "two queues, one name",
			yaml:    vendor("nvidia-h100-k8s", "H100", 1, `"90a"`) + vendor("nvidia-h100.k8s", "H100", 1, `"90a"`),
			wantErr: "would both be Kernelbot GPU H100_K8S_BK",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			reg, err := registry.Parse([]byte("vendors:\n" + tc.yaml))
			if err != nil {
				t.Fatal(err)
			}
			got, err := GPUs(reg)
			if tc.wantErr != "" {
				// The message is the contract: it names the Kernelbot GPU both queues would take, for the operator to rename one.
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v; want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("GPUs = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

// TestBuiltinRegistryNames: the names the issue asks for are there, and
// every queue of the registry is some BuildkiteGPU's (Nebius's included).
func TestBuiltinRegistryNames(t *testing.T) {
	t.Parallel()
	reg, err := registry.Load("")
	if err != nil {
		t.Fatal(err)
	}
	gpus, err := GPUs(reg)
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]string{}
	for _, g := range gpus {
		have[g.Name] = g.Queue
	}
	for name, queue := range map[string]string{"H100_BK": "nvidia-h100", "B200_BK": "nvidia-b200", "MI300_BK": "amd-mi300", "L40S_BK": "nvidia-l40s",
		"H100_Nebius_BK": "nebius-h100", "H100_K8S_Nebius_BK": "nebius-h100-k8s", "H100_MIG_BK": "nvidia-h100-mig", "MI300x8_BK": "amd-mi300x8"} {
		if have[name] != queue {
			t.Errorf("%s runs on %q; want %q", name, have[name], queue)
		}
	}
	reached := map[string]bool{}
	for _, g := range gpus {
		reached[g.Queue] = true
	}
	for _, v := range reg.Vendors {
		if !reached[v.Queue] {
			t.Errorf("queue %s is no BuildkiteGPU's: Kernelbot cannot reach it", v.Queue)
		}
	}
}

func vendor(queue, gpu string, gpus int, arch string) string {
	runtime, image := "nvidia", "ghcr.io/gpu-mode/kbgen-runner-cuda:12.8.1"
	if arch == "null" {
		runtime, image = "rocm", "ghcr.io/gpu-mode/kbgen-runner-rocm:6.4"
	}
	return "  - {queue: " + queue + ", donor: X, gpu: " + gpu + ", runtime: " + runtime + ", arch: " + arch + ", image: " + image +
		", resources: {gpus: " + strconv.Itoa(gpus) + ", cpus: 4, memory: 8g, shm-size: 1g, pids-limit: 100}, timeouts: {startup-minutes: 5, max-minutes: 10}}\n"
}
