// Package gpuid is kbgen's one grammar of a GPU's identifier as the
// drivers print it: NVIDIA's GPU and MIG UUIDs (nvidia-smi -L, NVML's
// nvmlDeviceGetUUID) and AMD's "GPU-<unique id>" (rocm-smi --showuniqueid,
// the KFD topology's unique_id). Every plan is made from identifiers this
// package accepts, because they end up in shell files, a sudoers drop-in
// and docker's --gpus argument: anything else is refused where it is read.
package gpuid

import (
	"fmt"
	"strings"

	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/internal/lazyre"
)

// The canonical UUID NVML prints after its prefix: 8-4-4-4-12 hex digits.
const uuid = `[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}`

var (
	nvidiaGPU = lazyre.New(`^GPU-` + uuid + `$`)
	// Since driver R470 a MIG device has a UUID of its own, "MIG-<uuid>";
	// before it, nvidia-smi -L printed "MIG-GPU-<gpu uuid>/<gi>/<ci>"
	// (NVIDIA MIG user guide, "CUDA Device Enumeration":
	// https://docs.nvidia.com/datacenter/tesla/mig-user-guide/mig-device-names.html).
	nvidiaMIG = lazyre.New(`^MIG-` + uuid + `$`)
	legacyMIG = lazyre.New(`^MIG-GPU-` + uuid + `/[0-9]{1,2}/[0-9]{1,2}$`)
	// rocm-smi's unique id is a 64-bit number in hex ("0x18f68e602b8a790f"),
	// kbgen writes it without "0x" and in lower case.
	amdGPU = lazyre.New(`^GPU-[0-9a-f]{1,16}$`)
)

// Error is an identifier outside the grammar. Its text quotes the value
// with %q, so a hostile one (a newline, a sudoers line) prints inert.
type Error struct {
	Kind, Value, Want string
}

// ExitCode: an identifier outside the grammar is bad input (exit 2),
// whichever file or tool it came from.
func (e *Error) ExitCode() int { return exitcode.Usage }

func (e *Error) Error() string {
	return fmt.Sprintf("%s %q: want %s", e.Kind, e.Value, e.Want)
}

// NVIDIAGPU checks a whole NVIDIA GPU's UUID: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx.
func NVIDIAGPU(s string) error {
	if nvidiaGPU.MatchString(s) {
		return nil
	}
	return &Error{Kind: "NVIDIA GPU uuid", Value: s, Want: "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx (hex), as nvidia-smi -L prints it"}
}

// NVIDIAMIG checks a MIG device's UUID: MIG-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx.
// The pre-R470 form names a driver too old for kbgen (R570 or newer,
// docs/vendor-onboarding.md), and the sandbox grants devices by the
// current form only, so it is refused with that reason.
func NVIDIAMIG(s string) error {
	if nvidiaMIG.MatchString(s) {
		return nil
	}
	if legacyMIG.MatchString(s) {
		return &Error{Kind: "MIG uuid", Value: s, Want: "MIG-<uuid>: this is the pre-R470 driver's form; update the NVIDIA driver (570 or newer)"}
	}
	return &Error{Kind: "MIG uuid", Value: s, Want: "MIG-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx (hex), as nvidia-smi -L prints it"}
}

// NVIDIA checks either kind of NVIDIA identifier, by its prefix.
func NVIDIA(s string) error {
	if strings.HasPrefix(s, "MIG-") {
		return NVIDIAMIG(s)
	}
	return NVIDIAGPU(s)
}

// AMD checks an AMD GPU's unique id as kbgen writes it: GPU- and up to
// 16 lower-case hex digits.
func AMD(s string) error {
	if amdGPU.MatchString(s) {
		return nil
	}
	return &Error{Kind: "AMD GPU unique id", Value: s, Want: "GPU- and 1 to 16 hex digits (rocm-smi --showuniqueid)"}
}

// IsMIG reports whether s names a MIG device (valid or not).
func IsMIG(s string) bool { return strings.HasPrefix(s, "MIG-") }
