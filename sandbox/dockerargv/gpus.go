package dockerargv

import (
	"github.com/gpu-mode/kbgen/internal/gpuid"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/plugincfg"
	"github.com/gpu-mode/kbgen/sandbox/refusal"
)

// gpuGrant is what a step gets of its agent's GPUs: the docker flags and
// the GPUs by name (for the lease and the clean-GPU check).
type gpuGrant struct {
	flags [][]string
	ids   []string
}

// grantGPUs hands the container every GPU of this agent, by UUID or
// render node. A step gets exactly its agent's GPUs: asking for more is
// beyond what the agent owns, asking for fewer means the step reached an
// agent of another shape (a one-GPU step on an 8-GPU agent would hold
// seven idle); both are refusals (75), so Buildkite retries elsewhere.
func grantGPUs(cfg plugincfg.GPUDocker, pl Placement, host Host) (gpuGrant, error) {
	asked := max(cfg.GPUs, 1)
	switch cfg.Runtime {
	case contract.RuntimeNVIDIA:
		return grantNVIDIA(asked, pl.GPUUUIDs)
	case contract.RuntimeROCm:
		return grantROCm(asked, pl.RenderNodes, host)
	case "":
		return gpuGrant{}, refusal.ConfigErrorf("runtime", "missing (want \"nvidia\" or \"rocm\")")
	default:
		return gpuGrant{}, refusal.ConfigErrorf("runtime", "%q is not a GPU runtime (want \"nvidia\" or \"rocm\")", cfg.Runtime)
	}
}

// grantNVIDIA is --gpus with the agent's GPU or MIG UUIDs.
func grantNVIDIA(asked int, uuids []string) (gpuGrant, error) {
	if len(uuids) == 0 {
		return gpuGrant{}, refusal.Refusef("this agent has no NVIDIA GPU placement: %s is not set", contract.EnvGPUUUID)
	}
	if err := checkCount(asked, len(uuids)); err != nil {
		return gpuGrant{}, err
	}
	for _, u := range uuids {
		if err := gpuid.NVIDIA(u); err != nil {
			return gpuGrant{}, refusal.Refusef("%s: %q is not an NVIDIA GPU UUID (%v)", contract.EnvGPUUUID, u, err)
		}
	}
	if dup := duplicate(uuids); dup != "" {
		return gpuGrant{}, refusal.Refusef("%s lists %s twice", contract.EnvGPUUUID, dup)
	}
	// By UUID, never index: indexes change with driver reloads and
	// CUDA_VISIBLE_DEVICES alone is a hint the submission can unset.
	// --gpus goes through the NVIDIA container toolkit's hook with the
	// default runc runtime, so no --runtime nvidia is needed. docker
	// reads the value as CSV, so a list of devices is one quoted field
	// ("device=A,B"; docker/cli opts/gpus.go).
	value := "device=" + strings.Join(uuids, ",")
	if len(uuids) > 1 {
		value = `"` + value + `"`
	}
	return gpuGrant{flags: [][]string{{"--gpus", value}}, ids: slices.Clone(uuids)}, nil
}

// grantROCm is /dev/kfd and the agent's render nodes as devices, with
// their groups.
func grantROCm(asked int, nodes []string, host Host) (gpuGrant, error) {
	if len(nodes) == 0 {
		return gpuGrant{}, refusal.Refusef("this agent has no AMD GPU placement: %s is not set", contract.EnvGPURenderNode)
	}
	if err := checkCount(asked, len(nodes)); err != nil {
		return gpuGrant{}, err
	}
	for _, n := range nodes {
		if !renderNode.MatchString(n) {
			return gpuGrant{}, refusal.Refusef("%s: %q is not a render node (/dev/dri/renderD<n>)", contract.EnvGPURenderNode, n)
		}
	}
	if dup := duplicate(nodes); dup != "" {
		return gpuGrant{}, refusal.Refusef("%s lists %s twice", contract.EnvGPURenderNode, dup)
	}
	gids, err := deviceGIDs(append(slices.Clone(nodes), host.KFD), host)
	if err != nil {
		return gpuGrant{}, err
	}
	// /dev/kfd is the one compute device of the host; KFD only lets a
	// process use the GPUs whose render nodes it can open, so these
	// are all the container gets.
	lines := [][]string{{"--device", host.KFD}}
	ids := make([]string, 0, len(nodes))
	for _, n := range nodes {
		lines = append(lines, []string{"--device", n})
		ids = append(ids, path.Base(n))
	}
	// The devices' own groups (video, render) by number: the image's
	// /etc/group need not have them, or may number them differently.
	for _, g := range gids {
		lines = append(lines, []string{"--group-add", strconv.Itoa(g)})
	}
	return gpuGrant{flags: lines, ids: ids}, nil
}

// deviceGIDs are the sorted groups of devs, each of which must be a
// character device; the agent's own render nodes come first, since they
// are what a misplaced agent gets wrong, and the message should say so.
func deviceGIDs(devs []string, host Host) ([]int, error) {
	var gids []int
	for _, dev := range devs {
		d, err := host.Stat(dev)
		if err != nil {
			return nil, refusal.Refusef("GPU device %s is not there: %v", dev, err)
		}
		if !d.CharDevice {
			return nil, refusal.Refusef("GPU device %s is not a character device", dev)
		}
		if !slices.Contains(gids, d.GID) {
			gids = append(gids, d.GID)
		}
	}
	slices.Sort(gids)
	return gids, nil
}

// checkCount refuses a step whose GPU count is not its agent's.
func checkCount(asked, owned int) error {
	switch {
	case asked > owned && owned == 1:
		return refusal.Refusef("gpus: %d asked, this agent owns one GPU", asked)
	case asked > owned:
		return refusal.Refusef("gpus: %d asked, this agent owns %d", asked, owned)
	case asked < owned:
		return refusal.Refusef("gpus: %d asked, but this agent owns %d and a step gets all of them (a step of a one-GPU queue reached a multi-GPU agent)", asked, owned)
	}
	return nil
}

func duplicate(list []string) string {
	for i, v := range list {
		if slices.Contains(list[:i], v) {
			return v
		}
	}
	return ""
}
