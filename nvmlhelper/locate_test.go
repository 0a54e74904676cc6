package nvmlhelper_test

import (
	"os"
	"testing"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/nvmlhelper"
)

func TestLocate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	beside := dir + "/" + nvmlhelper.Name
	if err := os.WriteFile(beside, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	noHelper := t.TempDir()
	tests := []struct {
		name      string
		env       []string
		exe       string
		path, why string
	}{
		{"beside kbgen", nil, dir + "/kbgen", beside, ""},
		{"none beside kbgen", nil, noHelper + "/kbgen", "", "no kbgen-nvml beside kbgen (" + noHelper + ")"},
		{"named", []string{contract.EnvNVMLHelper + "=" + beside}, noHelper + "/kbgen", beside, ""},
		{"named, missing", []string{contract.EnvNVMLHelper + "=" + noHelper + "/x"}, dir + "/kbgen", "", contract.EnvNVMLHelper + "=" + noHelper + "/x is not an executable file"},
		{"off", []string{contract.EnvNVMLHelper + "=off"}, dir + "/kbgen", "", contract.EnvNVMLHelper + "=off"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := nvmlhelper.Locate(contract.EnvironLookup(tc.env), tc.exe)
			if want := (nvmlhelper.Location{Path: tc.path, Absent: tc.why}); got != want {
				t.Errorf("Locate = %+v, want %+v", got, want)
			}
		})
	}
}
