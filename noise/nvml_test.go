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
