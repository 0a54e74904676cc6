package registry

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpu-mode/kbgen/payload"
	"gopkg.in/yaml.v3"
)

func TestEmbeddedRegistry(t *testing.T) {
	t.Parallel()
	reg, err := Load("")
	if err != nil {
		t.Fatal(err)
	}
	// The queues the issue and Kernelbot name must all resolve.
	want := map[string]string{
		"nvidia-h100": "H100", "nvidia-b200": "B200", "nvidia-a100": "A100", "nvidia-l40s": "L40S",
		"nebius-h100": "H100", "amd-mi300": "MI300X", "amd-mi250": "MI250X", "amd-mi355x": "MI355X",
		"h100": "H100", "b200": "B200", "mi300": "MI300X", "test": "L40S",
		// Multi-GPU shapes (Kernelbot's MI300x8 and L4x4) and MIG.
		"amd-mi300x8": "MI300X", "mi300x8": "MI300X", "nvidia-h100x8": "H100", "h100x8": "H100",
		"nvidia-l4x4": "L4", "l4x4": "L4", "nvidia-h100-mig": "H100", "h100-mig": "H100",
	}
	for q, gpu := range want {
		v, err := reg.Lookup(q)
		if err != nil {
			t.Errorf("%s: %v", q, err)
			continue
		}
		if v.GPU != gpu {
			t.Errorf("%s: gpu %s, want %s", q, v.GPU, gpu)
		}
	}
	// Kernelbot's GPU_TO_SM, and no arch on AMD.
	arch := map[string]string{"nvidia-h100": "90a", "nvidia-b200": "100", "nvidia-a100": "80", "nvidia-l40s": "89", "nvidia-l4": "89", "nvidia-t4": "75", "amd-mi300": ""}
	for q, a := range arch {
		v, _ := reg.Lookup(q)
		if v.ArchString() != a {
			t.Errorf("%s: arch %q, want %q", q, v.ArchString(), a)
		}
	}
	for q, n := range map[string]int{"mi300x8": 8, "h100x8": 8, "l4x4": 4, "h100": 1, "h100-mig": 1} {
		if v, _ := reg.Lookup(q); v.Resources.GPUs != n {
			t.Errorf("%s: %d GPUs a step, want %d", q, v.Resources.GPUs, n)
		}
	}
	if v, _ := reg.Lookup("h100-mig"); v.RunsMode(payload.ModeLeaderboard) || !v.RunsMode(payload.ModeTest) {
		t.Errorf("a MIG queue runs %v: want test only", v.Modes)
	}
	if !reg.IsAlias("h100") || reg.IsAlias("nvidia-h100") {
		t.Error("alias detection wrong")
	}
}

func TestUnknownQueueListsKnown(t *testing.T) {
	t.Parallel()
	reg, _ := Load("")
	_, err := reg.Lookup("h200")
	var uq *UnknownQueueError
	if !errors.As(err, &uq) {
		t.Fatalf("want UnknownQueueError, got %v", err)
	}
	// The message is built from Known; the CLI transcripts (golden/cli)
	// hold its wording.
	if uq.Queue != "h200" || !slices.Contains(uq.Known, "nvidia-h100") || !slices.Contains(uq.Known, "mi300") {
		t.Errorf("queue %q, known %v: want h200 and the known queues", uq.Queue, uq.Known)
	}
}

func TestRegistryValidation(t *testing.T) {
	t.Parallel()
	const good = `vendors:
  - queue: q1
    donor: D
    gpu: G
    runtime: nvidia
    arch: "90a"
    image: example.com/img:1
    resources: {gpus: 1, cpus: 2, memory: 8g, shm-size: 1g, pids-limit: 256}
    timeouts: {startup-minutes: 5, max-minutes: 30}
`
	tests := []struct {
		name    string
		replace [2]string
		// field is the FieldError's Field; key an unknown key, which the
		// YAML decoder refuses and names (the operator reads which).
		field, key string
	}{
		{"good", [2]string{"", ""}, "", ""},
		{"bad runtime", [2]string{"runtime: nvidia", "runtime: cuda"}, "runtime", ""},
		{"bad memory", [2]string{"memory: 8g", "memory: lots"}, "resources.memory", ""},
		{"bad shm", [2]string{"shm-size: 1g", "shm-size: 1e3"}, "resources.shm-size", ""},
		{"zero shm, docker's no limit", [2]string{"shm-size: 1g", "shm-size: 0g"}, "resources.shm-size", ""},
		// The sandbox and the pod spec read sizes with internal/size too:
		// what they take, the registry takes (1.5g was refused here only).
		{"fractional memory", [2]string{"memory: 8g", "memory: 1.5g"}, "", ""},
		{"docker's GiB spelling", [2]string{"shm-size: 1g", "shm-size: 1GiB"}, "", ""},
		{"unknown key", [2]string{"gpu: G", "gpu: G\n    gpu_count: 8"}, "", "gpu_count"},
		{"bad image", [2]string{"example.com/img:1", "Example.com/$(id)"}, "image", ""},
		// internal/imageref, the sandbox's parser too: docker's grammar.
		{"upper-case repository", [2]string{"example.com/img:1", "example.com/Img:1"}, "image", ""},
		{"registry port, upper-case tag", [2]string{"example.com/img:1", "localhost:5000/img:12.8-Devel"}, "", ""},
		{"arch on rocm", [2]string{"runtime: nvidia", "runtime: rocm"}, "arch", ""},
		{"bad queue", [2]string{"queue: q1", "queue: Q 1"}, "queue", ""},
		{"bad mode", [2]string{"gpu: G", "gpu: G\n    modes: [test, ranked]"}, "modes", ""},
		{"modes", [2]string{"gpu: G", "gpu: G\n    modes: [test, benchmark]"}, "", ""},
		{"no cpus", [2]string{"cpus: 2", "cpus: 0"}, "resources.cpus", ""},
		{"low pids", [2]string{"pids-limit: 256", "pids-limit: 8"}, "resources.pids-limit", ""},
		{"no max timeout", [2]string{"max-minutes: 30", "max-minutes: 0"}, "timeouts.max-minutes", ""},
		{"noise policy", [2]string{"max-minutes: 30}", "max-minutes: 30}\n    noise: {max_steal_percent: 2.5, retry: true}"}, "", ""},
		{"noise threshold out of range", [2]string{"max-minutes: 30}", "max-minutes: 30}\n    noise: {max_steal_percent: 150}"}, "noise", ""},
		{"unknown noise key", [2]string{"max-minutes: 30}", "max-minutes: 30}\n    noise: {steal: 5}"}, "", "steal"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			doc := good
			if tt.replace[0] != "" {
				doc = strings.Replace(good, tt.replace[0], tt.replace[1], 1)
			}
			_, err := Parse([]byte(doc))
			var fe *FieldError
			var te *yaml.TypeError
			switch {
			case tt.field == "" && tt.key == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.field != "" && (!errors.As(err, &fe) || fe.Field != tt.field):
				t.Fatalf("want a FieldError for %s, got %v", tt.field, err)
			case tt.key != "" && (!errors.As(err, &te) || !strings.Contains(err.Error(), tt.key)):
				t.Fatalf("want the unknown key %s named, got %v", tt.key, err)
			}
		})
	}
	dup := good + strings.Replace(strings.TrimPrefix(good, "vendors:\n"), "queue: q1", "queue: q2\n    aliases: [q1]", 1)
	var de *DuplicateQueueError
	if _, err := Parse([]byte(dup)); !errors.As(err, &de) || *de != (DuplicateQueueError{Name: "q1", First: "q1", Second: "q2"}) {
		t.Fatalf("duplicate queue not caught: %v", err)
	}
	if _, err := Parse([]byte("vendors: []\n")); err == nil {
		t.Fatal("empty registry accepted")
	}
}

// TestRegistrySizesCanonical: sizes are kept in docker's shortest whole
// form, the one plugin.yml's schema states and the plugin config carries.
func TestRegistrySizesCanonical(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, memory, shm, wantMemory, wantShm string }{
		{"already canonical", "8g", "1g", "8g", "1g"},
		{"fraction", "1.5g", "0.5g", "1536m", "512m"},
		{"docker's other spellings", "8GiB", "1024 mb", "8g", "1g"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			doc := fmt.Sprintf("vendors:\n  - {queue: q1, donor: D, gpu: G, runtime: nvidia, image: img:1, resources: {gpus: 1, cpus: 2, memory: %q, shm-size: %q, pids-limit: 256}, timeouts: {max-minutes: 30}}\n", tt.memory, tt.shm)
			reg, err := Parse([]byte(doc))
			if err != nil {
				t.Fatal(err)
			}
			if r := reg.Vendors[0].Resources; r.Memory != tt.wantMemory || r.ShmSize != tt.wantShm {
				t.Errorf("memory %q, shm-size %q; want %q, %q", r.Memory, r.ShmSize, tt.wantMemory, tt.wantShm)
			}
		})
	}
}

func TestLoadRegistryFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "v.yaml")
	if _, err := Load(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
	os.WriteFile(path, []byte("vendors:\n  - queue: x\n"), 0o644)
	// The message is the contract: the operator reads which file to fix.
	if _, err := Load(path); !errors.As(err, new(*FieldError)) || !strings.Contains(err.Error(), path) {
		t.Fatalf("error should name the file: %v", err)
	}
}
