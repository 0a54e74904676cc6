package dockerargv

import (
	"os"
	"syscall"
)

// Host is what DockerRun reads from the machine besides the environment, so
// tests can describe a machine they are not running on.
type Host struct {
	// SysfsRoot is "/sys": CPU topology for keeping SMT siblings together.
	SysfsRoot string
	// KFD is the ROCm compute device, "/dev/kfd".
	KFD string
	// Stat describes a device file; nil means os.Stat.
	Stat func(path string) (Device, error)
	// Glob lists device files (the process launcher's render nodes); nil
	// means filepath.Glob.
	Glob func(pattern string) ([]string, error)
}

// Device is what DockerRun needs to know about a device file.
type Device struct {
	CharDevice bool
	GID        int
}

// LocalHost is this machine.
func LocalHost() Host { return Host{SysfsRoot: "/sys", KFD: "/dev/kfd", Stat: statDevice} }

func statDevice(path string) (Device, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return Device{}, err
	}
	d := Device{CharDevice: fi.Mode()&os.ModeCharDevice != 0}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		d.GID = int(st.Gid)
	}
	return d, nil
}
