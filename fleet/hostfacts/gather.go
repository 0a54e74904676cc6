package hostfacts

import (
	"bufio"
	"io/fs"
	"path"
	"strconv"
	"strings"

	"github.com/gpu-mode/kbgen/fleet/runfacts"
	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/imageref"
	"github.com/gpu-mode/kbgen/internal/nvsmi"
	"github.com/gpu-mode/kbgen/internal/version"
	"github.com/gpu-mode/kbgen/noise"
	"github.com/gpu-mode/kbgen/plugincfg"
)

// Host is where the facts are read from.
type Host struct {
	Lookup contract.Lookup
	// Proc is the host's /proc (os.DirFS("/proc"), or a fixture tree).
	Proc fs.FS
	Name string // the host's name (os.Hostname)
	// PowerLimits is nvidia-smi's answer to nvsmi.PowerLimitArgs; nil
	// where not read (an AMD host, no nvidia-smi).
	PowerLimits []byte
	// ImagePulled is ImagePulled's answer for the step's image; nil
	// where not asked or not known.
	ImagePulled *bool
}

// Gather is the run's facts from h and its noise record (nil: none): the
// attempt from BUILDKITE_RETRY_COUNT, the sandbox's exit status from
// KBGEN_SANDBOX_EXIT (the hook's).
func Gather(h Host, rec *noise.Record) runfacts.Facts {
	get := func(k string) string { v, _ := h.Lookup(k); return strings.TrimSpace(v) }
	f := runfacts.Facts{
		Agent:        get(contract.EnvAgentName),
		Queue:        firstOf(get(contract.EnvQueue), get(contract.EnvAgentQueue)),
		Node:         h.Name,
		GPUUUIDs:     split(firstOf(get(contract.EnvGPUUUID), get(contract.EnvGPURenderNode))),
		ImageDigest:  image(get(plugincfg.EnvPrefix + "IMAGE")),
		KbgenVersion: version.String(),
		ImagePulled:  h.ImagePulled,
	}
	if n, err := strconv.Atoi(get(contract.EnvBuildkiteRetryCount)); err == nil && n >= 0 {
		f.Attempt = n + 1
	} else {
		f.Attempt = 1
	}
	if n, err := strconv.Atoi(get(contract.EnvSandboxExit)); err == nil {
		f.Exit = &n
	}
	if h.Proc != nil {
		f.Driver = nvidiaDriver(h.Proc)
		f.GPUModel = nvidiaModel(h.Proc, f.GPUUUIDs)
	}
	f.PowerLimit = powerLimit(h.PowerLimits, f.GPUUUIDs)
	if rec != nil {
		f.Noise, f.NoiseReasons = verdict(rec)
		f.Xids, f.ClockEventSeconds = rec.FleetCounts()
	}
	return f.Clean()
}

// powerLimit is the run's GPUs' power limits in their order, in watts
// ("700 W", "700/650 W"); "" unless every one of them reported one (a MIG
// instance's UUID is not in nvidia-smi's GPU list: its parent's limit
// applies, but which parent is not known here).
func powerLimit(out []byte, uuids []string) string {
	if out == nil || len(uuids) == 0 {
		return ""
	}
	w := nvsmi.PowerLimits(out)
	var parts []string
	for _, u := range uuids {
		v, ok := w[u]
		if !ok {
			return ""
		}
		parts = append(parts, strconv.FormatFloat(v, 'f', -1, 64))
	}
	return strings.Join(parts, "/") + " W"
}

func firstOf(xs ...string) string {
	for _, x := range xs {
		if x != "" {
			return x
		}
	}
	return ""
}

func split(s string) []string {
	var out []string
	for _, x := range strings.Split(s, ",") {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}

// image is the reference's digest when the step pinned one, else the
// reference as the step named it.
func image(ref string) string {
	if r, err := imageref.Parse(ref); err == nil && r.Digest != "" {
		return r.Digest
	}
	return ref
}

// verdict is the record's verdict (the host's own section can make it
// noisy too) and its external reasons' messages.
func verdict(rec *noise.Record) (string, []string) {
	v := rec.Verdict
	var reasons []noise.Reason
	reasons = append(reasons, rec.Reasons...)
	if rec.Host != nil {
		if rec.Host.Verdict == noise.Noisy {
			v = noise.Noisy
		}
		reasons = append(reasons, rec.Host.Reasons...)
	}
	var msgs []string
	for _, r := range reasons {
		if r.External {
			msgs = append(msgs, r.Source+": "+r.Message)
		}
	}
	return string(v), msgs
}

// nvidiaDriver is the NVIDIA kernel module's version from
// /proc/driver/nvidia/version ("NVRM version: NVIDIA UNIX x86_64 Kernel
// Module  550.54.15  Tue Mar  5 …"); "" without the module.
func nvidiaDriver(proc fs.FS) string {
	b, err := fs.ReadFile(proc, "driver/nvidia/version")
	if err != nil {
		return ""
	}
	line, _, _ := strings.Cut(string(b), "\n")
	_, after, ok := strings.Cut(line, "Kernel Module")
	if !ok {
		return ""
	}
	if fields := strings.Fields(after); len(fields) > 0 {
		return fields[0]
	}
	return ""
}

// nvidiaModel is the model of the first of uuids the kernel module lists
// in /proc/driver/nvidia/gpus/*/information ("Model: …", "GPU UUID: …").
func nvidiaModel(proc fs.FS, uuids []string) string {
	dirs, err := fs.ReadDir(proc, "driver/nvidia/gpus")
	if err != nil || len(uuids) == 0 {
		return ""
	}
	for _, d := range dirs {
		model, uuid := gpuInformation(proc, path.Join("driver/nvidia/gpus", d.Name(), "information"))
		if uuid != "" && uuid == uuids[0] {
			return model
		}
	}
	return ""
}

func gpuInformation(proc fs.FS, name string) (model, uuid string) {
	f, err := proc.Open(name)
	if err != nil {
		return "", ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		switch strings.TrimSpace(k) {
		case "Model":
			model = strings.TrimSpace(v)
		case "GPU UUID":
			uuid = strings.TrimSpace(v)
		}
	}
	return model, uuid
}
