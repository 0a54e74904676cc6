package e2e

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The queues of the four-GPU node: one GPU, two and four a step.
const (
	l4Queue   = "nvidia-l4"
	l4x2Queue = "nvidia-l4x2"
	l4x4Queue = "nvidia-l4x4"
)

// l4x4Node is node/testdata/l4x4 (four L4s, PCIe pairs on two NUMA
// nodes) served as l4Queue with the shapes l4x2Queue and l4x4Queue:
// `kbgen node install` plans gpu0…gpu3, gpux2-0 (GPUs 0,1), gpux2-1
// (2,3) and gpux4-0 (all four). There is no GPU and no NVIDIA runtime
// here, so each agent's docker is fakeToolkit's, and the sandbox runs
// with its GPU flags (KBGEN_SANDBOX_NO_GPU unset) and takes the real
// lease, in a lease directory of the test's.
var l4x4Node = &nodeFixture{
	queue: l4Queue,
	install: func(h *harness) []string {
		fixture := filepath.Join(srcRoot(h.t), "node", "testdata", "l4x4")
		writeFakeToolkit(h)
		return []string{"--sysfs", filepath.Join(fixture, "sys"), "--nvidia-smi", filepath.Join(fixture, "nvidia-smi.csv"),
			"--nvidia-topo", filepath.Join(fixture, "nvidia-smi-topo.txt"), "--shape", l4x2Queue, "--shape", l4x4Queue,
			"--reserve-cores", "1", "--reserve-memory", "1g"}
	},
	vendors: func(image string, maxMinutes int) string {
		var b strings.Builder
		b.WriteString("vendors:\n")
		for _, q := range []struct {
			queue string
			gpus  int
		}{{l4Queue, 1}, {l4x2Queue, 2}, {l4x4Queue, 4}} {
			fmt.Fprintf(&b, `  - queue: %s
    donor: NVIDIA
    gpu: L4
    runtime: nvidia
    arch: "89"
    image: %s
    resources: {gpus: %d, cpus: 1, memory: 1g, shm-size: 64m, pids-limit: 512}
    timeouts: {startup-minutes: 5, max-minutes: %d}
`, q.queue, image, q.gpus, maxMinutes)
		}
		return b.String()
	},
	agentEnv: func(h *harness, _ NodeAgent) []string {
		return []string{"KBGEN_SANDBOX_NO_GPU=", "PATH=" + filepath.Join(h.dir, "toolkit") + ":" + h.bin + ":" + os.Getenv("PATH"),
			"KBGEN_LEASE_DIR=" + filepath.Join(h.dir, "lease")}
	},
	placement: func(na NodeAgent) []string {
		// The plan's CPUs and memory are the fixture machine's (32 CPUs,
		// two NUMA nodes); this one has two CPUs and one node. GPU i's
		// agent gets CPU i%2, a shape agent both.
		cpus := "0-1"
		if len(na.Plan.GPUs) == 0 {
			cpus = strconv.Itoa(na.Plan.GPU.Index % 2)
		}
		return []string{"KERNELBOT_CPUSET=" + cpus, "KERNELBOT_MEMS=0", "KERNELBOT_MEMORY=1g", "KERNELBOT_CGROUP_PARENT="}
	},
}

// fakeToolkit is the docker every agent of l4x4Node runs: the NVIDIA
// Container Toolkit as far as kbgen's runner can tell, and a record of
// each container. `docker run --gpus device=A,B …` becomes a container
// with NVIDIA_VISIBLE_DEVICES=A,B and an nvidia-smi that lists two GPUs
// (what the runner's GPU probe reads); the run's GPUs and the times it
// started and ended (nanoseconds) go to the record, one line each. The
// container lives only while its `docker run` does, so these intervals
// hold the containers' lives. Other commands go to docker as they are.
const fakeToolkit = `#!/bin/sh
[ "$1" = run ] || exec %[1]s "$@"
shift
gpus= name= prev=
for a; do
	shift
	case "$prev" in
	--gpus) a=${a#\"}; a=${a%%\"}; gpus=${a#device=}; prev=; continue ;;
	--name) name=$a ;;
	esac
	prev=$a
	[ "$a" = --gpus ] && continue
	set -- "$@" "$a"
done
smi=%[2]s/smi-$name
{
	echo '#!/bin/sh'
	echo 'case "$*" in *--query-gpu=name*) ;; *) exit 0 ;; esac'
	for g in $(echo "$gpus" | tr , ' '); do echo "echo 'NVIDIA L4'"; done
} >"$smi"
chmod 755 "$smi"
echo "start $name $gpus $(date +%%s%%N)" >>%[3]s
%[1]s run --env "NVIDIA_VISIBLE_DEVICES=$gpus" --mount "type=bind,source=$smi,target=/usr/bin/nvidia-smi,readonly" "$@"
rc=$?
echo "end $name $(date +%%s%%N) $rc" >>%[3]s
exit $rc
`

// writeFakeToolkit writes fakeToolkit as h.dir/toolkit/docker.
func writeFakeToolkit(h *harness) {
	real, err := exec.LookPath("docker")
	must(h.t, err)
	dir := filepath.Join(h.dir, "toolkit")
	must(h.t, os.MkdirAll(dir, 0o755))
	script := fmt.Sprintf(fakeToolkit, real, dir, h.containerLog())
	must(h.t, os.WriteFile(filepath.Join(dir, "docker"), []byte(script), 0o755))
}

func (h *harness) containerLog() string { return filepath.Join(h.dir, "containers.log") }

// container is one `docker run` as fakeToolkit recorded it.
type container struct {
	Name       string
	GPUs       []string
	Start, End time.Time // End is zero while it runs (or if its run was killed)
	Code       int
}

// readContainers parses fakeToolkit's record, in start order.
func readContainers(path string) ([]*container, error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []*container
	byName := map[string]*container{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 4 {
			continue // a line being written
		}
		switch fields[0] {
		case "start": // start NAME GPU,GPU NS
			ns, err := strconv.ParseInt(fields[3], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("%s: %q: %v", path, sc.Text(), err)
			}
			c := &container{Name: fields[1], GPUs: strings.Split(fields[2], ","), Start: time.Unix(0, ns)}
			slices.Sort(c.GPUs)
			byName[c.Name] = c
			out = append(out, c)
		case "end": // end NAME NS CODE
			ns, err := strconv.ParseInt(fields[2], 10, 64)
			c := byName[fields[1]]
			if err != nil || c == nil {
				return nil, fmt.Errorf("%s: %q: no such start, or %v", path, sc.Text(), err)
			}
			c.End = time.Unix(0, ns)
			c.Code, _ = strconv.Atoi(fields[3])
		}
	}
	return out, sc.Err()
}

// overlapping finds two containers that held one GPU at once.
func overlapping(cs []*container) (a, b *container, gpu string) {
	for i, x := range cs {
		for _, y := range cs[i+1:] {
			if !x.Start.Before(y.End) || !y.Start.Before(x.End) {
				continue
			}
			for _, g := range x.GPUs {
				if slices.Contains(y.GPUs, g) {
					return x, y, g
				}
			}
		}
	}
	return nil, nil, ""
}
