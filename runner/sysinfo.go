package runner

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/lazyre"
	"github.com/gpu-mode/kbgen/internal/nvsmi"
	"github.com/gpu-mode/kbgen/payload"
)

// probeTimeout bounds each system probe. Probes run while the job runs,
// so they cost wall time only when the job is shorter than they are.
const probeTimeout = 20 * time.Second

// Probe is the system information gathered in the background.
type Probe struct {
	done chan struct{}
	info payload.SystemInfo
	// GPUFound reports whether any probe saw a GPU (SystemInfo's
	// device_count defaults to 1 as in Kernelbot, so it cannot tell).
	gpuFound bool
	// gpuErr is why a GPU tool that exists failed (a driver problem).
	gpuErr string
}

// StartProbe begins gathering SystemInfo the way Kernelbot's
// make_system_info does, concurrently: python3 (platform, torch version),
// nvidia-smi and rocm-smi at once, each bounded by probeTimeout.
func StartProbe(ctx context.Context, env []string) *Probe {
	p := &Probe{done: make(chan struct{})}
	go func() {
		defer close(p.done)
		p.gather(ctx, env)
	}()
	return p
}

// Wait returns the SystemInfo and whether a GPU was found.
func (p *Probe) Wait() (payload.SystemInfo, bool, string) {
	<-p.done
	return p.info, p.gpuFound, p.gpuErr
}

// ready reports whether the probe has finished.
func (p *Probe) ready() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// FixedProbe returns a Probe that reports info without running anything
// (tests, and callers that know the machine).
func FixedProbe(info payload.SystemInfo, gpuFound bool) *Probe {
	p := &Probe{done: make(chan struct{}), info: info, gpuFound: gpuFound}
	close(p.done)
	return p
}

func (p *Probe) gather(ctx context.Context, env []string) {
	info := payload.SystemInfo{DeviceCount: payload.DefaultDeviceCount}
	seen := make(chan gpusSeen, 1)
	go func() { seen <- probeGPUs(ctx, env) }()
	// Read from files rather than asked of Python: starting an interpreter
	// (let alone importing torch) costs more than the whole runner.
	info.CPU = cpuModel()
	info.Hostname, _ = os.Hostname()
	info.Platform = platformString()
	info.Torch = torchVersion(env)
	g := <-seen
	if g.count > 0 {
		info.GPU, info.DeviceCount, info.Runtime = g.name, g.count, g.runtime
		p.gpuFound = true
	}
	if n, ok := grantedGPUs(env); ok && p.gpuFound {
		// The sandbox says how many GPUs it gave; what the tools list
		// may be more (rocm-smi sees the host's sysfs).
		info.DeviceCount = n
	}
	p.gpuErr = g.err
	p.info = info
}

// gpusSeen is what the GPU tools say: the first GPU's name, how many
// they list and their runtime; err is why a tool that exists failed (a
// driver problem) when none listed a GPU.
type gpusSeen struct {
	name    string
	count   int
	runtime string
	err     string
}

// probeGPUs asks nvidia-smi and rocm-smi at once, each bounded by
// probeTimeout: the system probe before the job, and the runner's own
// check after a test run that printed a GPU runtime failure (gpuAnswers).
func probeGPUs(ctx context.Context, env []string) gpusSeen {
	var wg sync.WaitGroup
	var nv, roc []byte
	var nvErr, rocErr error
	wg.Add(2)
	go func() {
		defer wg.Done()
		nv, nvErr = probeOutput(ctx, env, append([]string{"nvidia-smi"}, nvsmi.NameArgs...)...)
	}()
	go func() {
		defer wg.Done()
		roc, rocErr = probeOutput(ctx, env, "rocm-smi", "--showproductname", "--json")
	}()
	wg.Wait()
	var g gpusSeen
	switch {
	case nvErr == nil && len(bytes.TrimSpace(nv)) > 0:
		names := strings.Split(strings.TrimSpace(string(nv)), "\n")
		return gpusSeen{name: strings.TrimSpace(names[0]), count: len(names), runtime: "CUDA"}
	case rocErr == nil:
		var cards map[string]map[string]any
		if json.Unmarshal(roc, &cards) == nil && len(cards) > 0 {
			for _, k := range sortedKeys(cards) {
				if s, ok := cards[k]["Card Series"].(string); ok {
					g.name = s
					break
				}
			}
			g.count, g.runtime = len(cards), "ROCm"
			return g
		}
	}
	for _, e := range []error{nvErr, rocErr} {
		if e != nil && !isNotFound(e) {
			g.err = e.Error()
		}
	}
	return g
}

func probeOutput(ctx context.Context, env []string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	path, err := lookPathIn(args[0], env)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, path, args[1:]...)
	cmd.Env = env
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := startManaged(cmd); err != nil {
		return nil, err
	}
	err = cmd.Wait()
	forgetManaged(cmd.Process.Pid)
	if err != nil {
		msg := strings.TrimSpace(strings.SplitN(errOut.String()+out.String(), "\n", 2)[0])
		if msg != "" {
			return nil, &probeError{tool: args[0], msg: msg}
		}
		return nil, &probeError{tool: args[0], msg: err.Error()}
	}
	return out.Bytes(), nil
}

type probeError struct{ tool, msg string }

func (e *probeError) Error() string { return e.tool + ": " + e.msg }

// cpuModel is Kernelbot's reading of /proc/cpuinfo: "model name", or the
// vendor when the model is "unknown".
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	// Later processors overwrite earlier ones, as the dict in Kernelbot does.
	fields := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		fields[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	if fields["model name"] == "unknown" {
		return fields["vendor_id"]
	}
	return fields["model name"]
}

// platformString is Python's platform.platform() on Linux:
// "Linux-<release>-<machine>-with-glibc<version>".
func platformString() string {
	s := unamePlatform()
	if v := glibcVersion(); v != "" {
		s += "-with-glibc" + v
	}
	return s
}

var glibcRelease = lazyre.New(`release version (\d+\.\d+)`)

// glibcVersion reads the C library's banner ("... release version 2.36.").
func glibcVersion() string {
	for _, pattern := range []string{"/lib/*-linux-gnu/libc.so.6", "/lib64/libc.so.6", "/usr/lib*/libc.so.6", "/usr/lib/*-linux-gnu/libc.so.6"} {
		matches, _ := filepath.Glob(pattern)
		for _, m := range matches {
			b, err := os.ReadFile(m)
			if err != nil {
				continue
			}
			if sm := glibcRelease.FindSubmatch(b); sm != nil {
				return string(sm[1])
			}
		}
	}
	return ""
}

// torchVersion finds torch's version the way importlib.metadata does, from
// a torch-<version>.dist-info directory in the site-packages of the
// python3 on the submission's PATH (or the usual system locations).
func torchVersion(env []string) string {
	var prefixes []string
	if py, err := lookPathIn("python3", env); err == nil {
		if real, err := filepath.EvalSymlinks(py); err == nil {
			prefixes = append(prefixes, filepath.Dir(filepath.Dir(real)))
		}
		prefixes = append(prefixes, filepath.Dir(filepath.Dir(py)))
	}
	for _, kv := range env {
		if k, v, _ := strings.Cut(kv, "="); (k == "VIRTUAL_ENV" || k == "CONDA_PREFIX") && v != "" {
			prefixes = append(prefixes, v)
		}
	}
	prefixes = append(prefixes, "/usr/local", "/usr", "/opt/conda")
	for _, prefix := range prefixes {
		for _, sub := range []string{"lib/python3*/site-packages", "lib/python3*/dist-packages", "lib/python3/dist-packages"} {
			matches, _ := filepath.Glob(filepath.Join(prefix, sub, "torch-*.dist-info"))
			for _, m := range matches {
				v := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(m), "torch-"), ".dist-info")
				if v != "" {
					return v
				}
			}
		}
	}
	return ""
}

// unamePlatform is "Linux-<release>-<machine>" from uname(2).
func unamePlatform() string {
	var u syscall.Utsname
	if syscall.Uname(&u) != nil {
		return "Linux"
	}
	str := func(b [65]int8) string {
		var s []byte
		for _, c := range b {
			if c == 0 {
				break
			}
			s = append(s, byte(c))
		}
		return string(s)
	}
	return str(u.Sysname) + "-" + str(u.Release) + "-" + str(u.Machine)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// grantedGPUs is contract.EnvGPUCount from env: the number of GPUs the
// sandbox gave this container; ok is false outside the sandbox or for a
// value that is not a positive integer.
func grantedGPUs(env []string) (int, bool) {
	for _, kv := range env {
		if v, found := strings.CutPrefix(kv, contract.EnvGPUCount+"="); found {
			n, err := strconv.Atoi(v)
			return n, err == nil && n > 0
		}
	}
	return 0, false
}
