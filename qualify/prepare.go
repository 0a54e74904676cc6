package qualify

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"

	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/node"
	"github.com/gpu-mode/kbgen/sandbox"
	"github.com/gpu-mode/kbgen/sandbox/dockerargv"
)

// GPUMode says whether the GPU part runs: auto where torch sees a GPU, on
// (required), off.
type GPUMode string

const (
	GPUAuto GPUMode = "auto"
	GPUOn   GPUMode = "on"
	GPUOff  GPUMode = "off"
)

// Setup is what `kbgen node qualify` was asked: where the plan comes
// from, how the runs reach each placement, and the GPU part. Prepare
// turns it into Options.
type Setup struct {
	// Root holds an installed plan; without one, Machine is planned afresh.
	Root    string
	Machine node.Source
	// Image is the calibration containers' image; "": the registry's
	// (Vendors, "": the built-in one) image for the plan's queue.
	Image, Vendors string
	// NoSandbox runs pinned processes (Direct) instead of containers;
	// NoGPU leaves the GPU flags out of the containers.
	NoSandbox, NoGPU bool
	GPU              GPUMode
	// Options are the measurement's knobs; Prepare fills in Plan,
	// Launcher, GPU and GPUNote.
	Options Options
}

// Prepare reads or makes the plan and chooses the launcher and the GPU
// part. A setup that cannot run as asked (no image, a dynamic kbgen to
// mount, --gpu on without a GPU runner) carries exitcode.Usage.
func Prepare(ctx context.Context, s Setup) (Options, error) {
	o := s.Options
	p, err := node.LoadOrPlan(ctx, s.Root, s.Machine)
	if err != nil {
		return o, err
	}
	self, err := os.Executable()
	if err != nil {
		return o, fmt.Errorf("finding this kbgen: %w", err)
	}
	o.Plan = p
	if o.Launcher, err = s.launcher(p, self); err != nil {
		return o, err
	}
	return o, s.gpuPart(ctx, &o)
}

// launcher is the sandbox's docker run on each placement, or (NoSandbox)
// processes pinned to its CPUs.
func (s Setup) launcher(p *node.Plan, self string) (Launcher, error) {
	if s.NoSandbox {
		return &Direct{Binary: self}, nil
	}
	image, err := s.image(p)
	if err != nil {
		return nil, err
	}
	if err := sandbox.CheckStatic(self); err != nil {
		return nil, exitcode.With(exitcode.Usage, err)
	}
	return &Docker{Plan: p, Image: image, RunnerBinary: self, Host: dockerargv.LocalHost(),
		NoGPU: s.NoGPU, Tag: strconv.Itoa(os.Getpid())}, nil
}

// image is Image, or the registry's image for the plan's queue.
func (s Setup) image(p *node.Plan) (string, error) {
	if s.Image != "" {
		return s.Image, nil
	}
	reg, err := node.LoadRegistry(s.Vendors)
	if err != nil {
		return "", err
	}
	if image := node.QueueImage(p, reg); image != "" {
		return image, nil
	}
	return "", exitcode.With(exitcode.Usage, ErrNoImage)
}

// ErrNoImage is a sandboxed calibration with no image to run it in: no
// --image, and no queue whose registry profile names one.
var ErrNoImage = errors.New("no image for the calibration containers: pass --image (any image; kbgen itself is mounted), or --no-sandbox")

// gpuPart sets o.GPU, or o.GPUNote saying why there is none. The GPU
// calibration is the host's python3 with torch, so only the pinned
// (NoSandbox) path has one.
func (s Setup) gpuPart(ctx context.Context, o *Options) error {
	switch {
	case s.GPU == GPUOff:
		o.GPUNote = "--gpu off"
	case !s.NoSandbox && s.GPU == GPUOn:
		return exitcode.With(exitcode.Usage, errors.New("--gpu on needs --no-sandbox: the GPU calibration runs on the host's python3 with torch"))
	case !s.NoSandbox:
		o.GPUNote = "the GPU calibration runs with --no-sandbox only (the host's python3 with torch)"
	default:
		var why string
		if o.GPU, why = FindGPURunner(ctx); o.GPU == nil && s.GPU == GPUOn {
			return exitcode.Usagef("--gpu on: %s", why)
		}
		o.GPUNote = why
	}
	return nil
}
