// Command kbgen-nvml is kbgen's NVML helper (package nvmlhelper): started
// by kbgen, it loads libnvidia-ml.so.1 once and answers line-delimited
// JSON requests on stdin with replies on stdout until stdin closes. It is
// the one dynamically linked kbgen binary (cgo, glibc); kbgen falls back
// to nvidia-smi wherever it cannot run.
//
//	echo '{"op":"inventory"}' | kbgen-nvml
package main

import (
	"fmt"
	"os"
	"syscall"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpu-mode/kbgen/nvmlhelper/serve"
)

// In the sandbox the helper runs as the submission's uid beside it; not
// dumpable, its /proc files are root's and the submission cannot ptrace
// it or read its memory (as cmd/kbgen/nodump_linux.go does for kbgen).
func init() {
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_DUMPABLE, 0, 0)
}

func main() {
	if len(os.Args) > 1 {
		fmt.Fprintln(os.Stderr, "usage: kbgen-nvml   (no arguments: requests on stdin, one JSON object a line; see package nvmlhelper)")
		os.Exit(2)
	}
	if err := serve.Serve(nvml.New(), os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "kbgen-nvml:", err)
		os.Exit(1)
	}
}
