package noise

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpu-mode/kbgen/nvmlhelper"
)

// The helper's path gives the record nvidia-smi gives, without running
// nvidia-smi; a helper that fails, at the start or mid-job, leaves
// nvidia-smi to finish the record and says why.
func TestNVMLHelper(t *testing.T) {
	helper, _ := filepath.Abs("testdata/bin/kbgen-nvml")
	reference := newScenario(t, "gpu-foreign").run("leaderboard", Policy{}).Runs["leaderboard"].NVIDIA
	if reference.Source != sourceNvidiaSMI || reference.Status != OK {
		t.Fatalf("the nvidia-smi reference = %+v", reference)
	}
	tests := []struct {
		name       string
		env        []string
		loc        nvmlhelper.Location
		source     string
		nvmlAbsent string
	}{
		// NVSMI_FAIL: nvidia-smi would make the source unavailable.
		{"helper", []string{"NVSMI_FAIL=1"}, nvmlhelper.Location{Path: helper}, sourceNVML, ""},
		{"no helper", nil, nvmlhelper.Location{Absent: "no kbgen-nvml beside kbgen (/usr/local/bin)"}, sourceNvidiaSMI, "no kbgen-nvml beside kbgen (/usr/local/bin)"},
		{"NVML does not load", []string{"NVML_FAIL=start"}, nvmlhelper.Location{Path: helper}, sourceNvidiaSMI, "kbgen-nvml: loading NVML: ERROR_LIBRARY_NOT_FOUND"},
		{"helper dies mid-job", []string{"NVML_FAIL=after1"}, nvmlhelper.Location{Path: helper}, sourceNvidiaSMI, "kbgen-nvml: crashed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newScenario(t, "gpu-foreign", tc.env...)
			s.cfg.NVML = tc.loc
			got := s.run("leaderboard", Policy{}).Runs["leaderboard"].NVIDIA
			if got.Source != tc.source || !strings.Contains(got.NVMLAbsent, tc.nvmlAbsent) || (tc.nvmlAbsent == "") != (got.NVMLAbsent == "") {
				t.Errorf("source %q, nvml_absent %q; want %q, one saying %q", got.Source, got.NVMLAbsent, tc.source, tc.nvmlAbsent)
			}
			got.Source, got.NVMLAbsent = reference.Source, reference.NVMLAbsent
			if d := cmp.Diff(reference, got, cmp.AllowUnexported(GPUSample{})); d != "" {
				t.Errorf("the record differs from nvidia-smi's (-nvidia-smi +got):\n%s", d)
			}
		})
	}
}

// A multi-GPU run records every GPU of its set, read either way: the
// first as "nvidia", the others as "nvidia_peers", and a peer's noise is
// named by its GPU.
func TestMultiGPURecord(t *testing.T) {
	helper, _ := filepath.Abs("testdata/bin/kbgen-nvml")
	const peer = "GPU-7a4c3b21-2d3e-4f60-9bac-1d2e3f4a5b6c"
	tests := []struct {
		name  string
		count int
		loc   nvmlhelper.Location
		peers int
	}{
		{"two GPUs, nvidia-smi", 2, nvmlhelper.Location{Absent: "none"}, 1},
		{"two GPUs, kbgen-nvml", 2, nvmlhelper.Location{Path: helper}, 1},
		{"one GPU of two visible", 1, nvmlhelper.Location{Path: helper}, 0},
		{"count unset is one", 0, nvmlhelper.Location{Absent: "none"}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newScenario(t, "gpu-pair")
			s.cfg.GPUCount, s.cfg.NVML = tc.count, tc.loc
			rec := s.run("leaderboard", Policy{})
			run := rec.Runs["leaderboard"]
			if len(run.NVIDIAPeers) != tc.peers {
				t.Fatalf("%d peers, want %d: %+v", len(run.NVIDIAPeers), tc.peers, run.NVIDIAPeers)
			}
			if run.NVIDIA.UUID != "GPU-6f3b2a10-1c2d-4e5f-8a9b-0c1d2e3f4a5b" || len(run.NVIDIA.ForeignProcesses) != 0 {
				t.Errorf("first GPU = %s with %v, want GPU-6f3b… and no foreign process", run.NVIDIA.UUID, run.NVIDIA.ForeignProcesses)
			}
			reasons := reasonsOf(rec)
			want := "nvidia external: GPU " + peer + ": other compute processes on the GPU: python3[777]"
			if got := strings.Contains(reasons, want); got != (tc.peers == 1) {
				t.Errorf("reasons say %q: %v, want %v:\n%s", want, got, tc.peers == 1, reasons)
			}
			if tc.peers == 1 {
				p := run.NVIDIAPeers[0]
				if p.UUID != peer || *p.After.PowerW != 301 {
					t.Errorf("peer = %s at %v W, want %s at 301 W", p.UUID, *p.After.PowerW, peer)
				}
			}
		})
	}
}

// The Xids NVML reported between a run's two samples are the run's: the
// machine's are external noise, the program's own (13, 31, 43, 45) its
// own; one drained by the before sample belongs to no run.
func TestXidsDuringRun(t *testing.T) {
	helper, _ := filepath.Abs("testdata/bin/kbgen-nvml")
	s := newScenario(t, "gpu-foreign", "NVML_FILE=nvml-xid.json")
	s.cfg.NVML = nvmlhelper.Location{Path: helper}
	rec := s.run("leaderboard", Policy{})
	nv := rec.Runs["leaderboard"].NVIDIA
	if d := cmp.Diff([]int{79, 13}, nv.Xids); d != "" {
		t.Errorf("Xids during the run (-want +got):\n%s", d)
	}
	reasons := reasonsOf(rec)
	for _, want := range []string{
		"nvidia external: Xid 79 on the GPU during the run: the machine's fault",
		"nvidia self: the program raised Xid 13 during the run (its own fault)",
	} {
		if !strings.Contains(reasons, want) {
			t.Errorf("reasons lack %q:\n%s", want, reasons)
		}
	}
	if strings.Contains(reasons, "Xid 48") {
		t.Errorf("the Xid before the run counted:\n%s", reasons)
	}
}
