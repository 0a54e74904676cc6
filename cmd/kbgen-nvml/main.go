// Command kbgen-nvml is kbgen's NVML helper (package nvmlhelper): started
// by kbgen, it loads libnvidia-ml.so.1 once and answers line-delimited
// JSON requests on stdin with replies on stdout until stdin closes. It is
// the one dynamically linked kbgen binary (cgo, glibc); kbgen falls back
// to nvidia-smi wherever it cannot run.
//
//	echo '{"op":"sample"}' | kbgen-nvml
//	kbgen-nvml inventory > nvml-inventory.json   # for kbgen node plan --nvml-inventory
package main

import (
	"fmt"
	"os"
	"syscall"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpu-mode/kbgen/nvmlhelper/nvmlserve"
)

// In the sandbox the helper runs as the submission's uid beside it; not
// dumpable, its /proc files are root's and the submission cannot ptrace
// it or read its memory (as cmd/kbgen/nodump_linux.go does for kbgen).
func init() {
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_DUMPABLE, 0, 0)
}

const usage = `usage: kbgen-nvml              serve requests on stdin, one JSON object a line (package nvmlhelper)
       kbgen-nvml inventory    print this node's GPUs, MIG instances and links (kbgen node plan --nvml-inventory)`

func main() {
	var err error
	switch {
	case len(os.Args) == 1:
		err = nvmlserve.Serve(nvml.New(), os.Stdin, os.Stdout)
	case len(os.Args) == 2 && os.Args[1] == "inventory":
		err = nvmlserve.WriteInventory(nvml.New(), os.Stdout)
	default:
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "kbgen-nvml:", err)
		os.Exit(1)
	}
}
