package node

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDoctorNVML runs the check against stand-in helpers that speak the
// protocol (package nvmlhelper) as kbgen-nvml does, beside a kbgen.
func TestDoctorNVML(t *testing.T) {
	t.Parallel()
	const hello = `echo '{"protocol":1,"driver":"570.124.06"}'`
	// answer replies to the inventory request, then to the sample.
	answer := func(gpus int) string {
		inv := `{"inventory":{"driver":"570.124.06","gpus":[` + strings.Repeat(`{"index":0,"uuid":"GPU-1","pci_bus":"00000000:18:00.0","name":"NVIDIA L4"},`, gpus)
		inv = strings.TrimSuffix(inv, ",") + `],"links":[]}}`
		return "read -r _; echo '" + inv + "'; read -r _; echo '{\"samples\":[{\"uuid\":\"GPU-1\"}]}'; read -r _"
	}
	plan := planFixture(t, "l4x4", defaultOpts)
	tests := []struct {
		name   string
		helper string // "" installs none
		state  string // pass, fail, skipped
		detail string // a regexp
	}{
		{"not installed", "", "skipped", `^no kbgen-nvml beside kbgen \(.*\): the noise record and node discovery use nvidia-smi`},
		{"works", hello + "\n" + answer(4), "pass", `^kbgen-nvml loads NVML \(driver 570\.124\.06\), sees 4 GPUs; a sample of every GPU took [0-9.]+ ms$`},
		{"NVML does not load", `echo '{"error":"loading NVML: ERROR_LIBRARY_NOT_FOUND"}'; exit 1`, "fail", `^kbgen-nvml: loading NVML: ERROR_LIBRARY_NOT_FOUND: every job would start it, fail, and fall back to nvidia-smi`},
		{"sees other GPUs than the plan", hello + "\n" + answer(2), "fail", `^NVML sees 2 GPUs, the installed plan 4`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			if tc.helper != "" {
				if err := os.WriteFile(filepath.Join(dir, "kbgen-nvml"), []byte("#!/bin/sh\n"+tc.helper+"\n"), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			c := (&Doctor{Kbgen: filepath.Join(dir, "kbgen")}).checkNVML(plan)
			state := map[bool]string{true: "pass", false: "fail"}[c.OK]
			if c.Skipped {
				state = "skipped"
			}
			if state != tc.state || !regexp.MustCompile(tc.detail).MatchString(c.Detail) {
				t.Errorf("%s: %s, want %s matching %q", state, c.Detail, tc.state, tc.detail)
			}
		})
	}
}
