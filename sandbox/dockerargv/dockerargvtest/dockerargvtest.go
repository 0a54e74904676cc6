// Package dockerargvtest (tests only) is the stand-in machine and agent
// placements the docker argv's tests and the sandbox's job tests share:
// a host of 224 CPUs in SMT pairs with GPU device files as given, the
// placement env of a one-GPU NVIDIA or AMD agent and of a multi-GPU one,
// and a planned flag's values.
package dockerargvtest

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/cpulist"
	"github.com/gpu-mode/kbgen/sandbox/dockerargv"
)

// FakeHost is a host whose /dev/kfd and render nodes exist (video 44,
// render 110) and whose CPUs n and n+112 are SMT siblings.
func FakeHost(t testing.TB, devices map[string]dockerargv.Device) dockerargv.Host {
	return dockerargv.Host{
		SysfsRoot: FakeSysfs(t, SMTPairs(112)...),
		KFD:       "/dev/kfd",
		Stat: func(p string) (dockerargv.Device, error) {
			if d, ok := devices[p]; ok {
				return d, nil
			}
			return dockerargv.Device{}, &fs.PathError{Op: "stat", Path: p, Err: fs.ErrNotExist}
		},
		Glob: func(pattern string) ([]string, error) {
			var paths []string
			for p := range devices {
				if ok, _ := filepath.Match(pattern, p); ok {
					paths = append(paths, p)
				}
			}
			slices.Sort(paths)
			return paths, nil
		},
	}
}

var AMDDevices = map[string]dockerargv.Device{
	"/dev/kfd":            {CharDevice: true, GID: 110},
	"/dev/dri/renderD168": {CharDevice: true, GID: 110},
	"/dev/dri/renderD128": {CharDevice: true, GID: 44},
	"/dev/dri/renderD200": {CharDevice: false, GID: 110},
}

func ROCmPlacementEnv() map[string]string {
	env := NVIDIAPlacementEnv()
	delete(env, contract.EnvGPUUUID)
	env[contract.EnvGPURenderNode] = "/dev/dri/renderD168"
	env[contract.EnvGPUIndex] = "5"
	env[contract.EnvCPUSet] = "60-71,172-183"
	env[contract.EnvMems] = "1"
	return env
}

// flag returns the values of every occurrence of name in the spec.
func FlagValues(s *dockerargv.Spec, name string) []string {
	var vals []string
	for _, l := range s.Lines {
		if l[0] == name && len(l) == 2 {
			vals = append(vals, l[1])
		}
	}
	return vals
}

// MultiGPUPlacementEnv is a multi-GPU agent as `kbgen node install`
// places it: n GPUs (UUIDs GPU-…000<i> or renderD128+i), the CPUs of both
// NUMA nodes of FakeHost but for a housekeeping core on each.
func MultiGPUPlacementEnv(rt contract.Runtime, n int) map[string]string {
	var ids, idx []string
	for i := range n {
		idx = append(idx, strconv.Itoa(i))
		if rt == contract.RuntimeROCm {
			ids = append(ids, fmt.Sprintf("/dev/dri/renderD%d", 128+i))
		} else {
			ids = append(ids, fmt.Sprintf("GPU-6f3b2a10-1c2d-4e5f-8a9b-0c1d2e3f4a%02d", i))
		}
	}
	env := map[string]string{
		contract.EnvGPUIndex: strings.Join(idx, ","),
		contract.EnvCPUSet:   "1-55,57-111,113-167,169-223",
		contract.EnvMems:     "0,1",
		contract.EnvMemory:   "1900g",
	}
	if rt == contract.RuntimeROCm {
		env[contract.EnvGPURenderNode] = strings.Join(ids, ",")
	} else {
		env[contract.EnvGPUUUID] = strings.Join(ids, ",")
	}
	return env
}

// MultiGPUDevices are FakeHost's devices for an 8-GPU AMD agent.
func MultiGPUDevices() map[string]dockerargv.Device {
	devs := map[string]dockerargv.Device{"/dev/kfd": {CharDevice: true, GID: 110}}
	for i := range 8 {
		devs[fmt.Sprintf("/dev/dri/renderD%d", 128+i)] = dockerargv.Device{CharDevice: true, GID: 44}
	}
	devs["/dev/dri/renderD135"] = dockerargv.Device{CharDevice: true, GID: 45}
	return devs
}

func NVIDIAPlacementEnv() map[string]string {
	return map[string]string{
		contract.EnvGPUIndex: "3",
		contract.EnvGPUUUID:  "GPU-6f3b2a10-1c2d-4e5f-8a9b-0c1d2e3f4a5b",
		contract.EnvCPUSet:   "36-47,148-159",
		contract.EnvMems:     "0",
		contract.EnvMemory:   "220g",
		contract.EnvPidsMax:  "8192",
		contract.EnvShmMax:   "64g",
	}
}

// FakeSysfs writes thread_siblings_list files for cores given as sibling
// lists ("0,4" for CPUs 0 and 4 on one core) and returns the sysfs root.
func FakeSysfs(t testing.TB, cores ...cpulist.Set) string {
	t.Helper()
	root := t.TempDir()
	for _, core := range cores {
		for _, c := range core {
			dir := filepath.Join(root, "devices/system/cpu", "cpu"+strconv.Itoa(c), "topology")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "thread_siblings_list"), []byte(core.String()+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	return root
}

// SMTPairs describes a machine whose CPU n and n+offset share a core, for
// n in [0, offset).
func SMTPairs(offset int) []cpulist.Set {
	cores := make([]cpulist.Set, offset)
	for n := range offset {
		cores[n] = cpulist.Set{n, n + offset}
	}
	return cores
}
