package nvmlhelper

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/gpu-mode/kbgen/internal/contract"
)

// Name is the helper's file name: releases ship it beside kbgen, `kbgen
// node install` installs it there, and the sandbox mounts it beside the
// runner.
const Name = "kbgen-nvml"

// Location is where the helper is, or why there is none to use (turned
// off, or not installed), which callers record before they fall back to
// nvidia-smi.
type Location struct {
	Path   string
	Absent string
}

// Locate finds the helper for a kbgen at exe: the path KBGEN_NVML_HELPER
// names, else Name beside exe.
func Locate(lookup contract.Lookup, exe string) Location {
	path, why := locate(lookup, exe)
	return Location{Path: path, Absent: why}
}

func locate(lookup contract.Lookup, exe string) (string, string) {
	switch v, _ := lookup(contract.EnvNVMLHelper); v {
	case "off":
		return "", contract.EnvNVMLHelper + "=off"
	case "":
		if exe == "" {
			return "", "kbgen's own path is unknown"
		}
		p := filepath.Join(filepath.Dir(exe), Name)
		if !executable(p) {
			return "", fmt.Sprintf("no %s beside kbgen (%s)", Name, filepath.Dir(exe))
		}
		return p, ""
	default:
		if !executable(v) {
			return "", fmt.Sprintf("%s=%s is not an executable file", contract.EnvNVMLHelper, v)
		}
		return v, ""
	}
}

func executable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}
