// Command qualifyfloat shows that `kbgen node qualify` tells the seed's
// floating setup from kbgen's pinned one on this machine: two agents, one
// on CPU 0 and one on CPU 1 (the end-to-end suite's layout), qualified as
// pinned processes (qualify.Direct, what `--no-sandbox` runs), then again
// with every agent given both CPUs (what `--floating` does). It prints each
// agent's quiet CV and its shift under the other agent's load, then the
// ratio of the mean floating shift to the mean pinned one. A benchmark, not
// a test: it times the machine it runs on.
//
//	go run ./scripts/qualifyfloat            # builds kbgen first
//	go run ./scripts/qualifyfloat -rep 50ms  # steadier, slower
package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/gpu-mode/kbgen/node"
	"github.com/gpu-mode/kbgen/qualify"
)

func main() {
	rep := flag.Duration("rep", 12*time.Millisecond, "about how long one calibration repetition takes")
	flag.Parse()
	if err := run(*rep); err != nil {
		fmt.Fprintln(os.Stderr, "qualifyfloat:", err)
		os.Exit(1)
	}
}

func run(rep time.Duration) error {
	dir, err := os.MkdirTemp("", "qualifyfloat-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "kbgen")
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/kbgen").CombinedOutput(); err != nil {
		return fmt.Errorf("building kbgen: %v\n%s", err, out)
	}
	plan := &node.Plan{Runtime: "nvidia", HostCPUs: "0", CgroupVersion: 1, Agents: []node.Agent{
		{ID: "gpu0", GPU: node.GPU{Index: 0, UUID: "GPU-0"}, CPUSet: "0", Mems: "0", Memory: "1g"},
		{ID: "gpu1", GPU: node.GPU{Index: 1, UUID: "GPU-1"}, CPUSet: "1", Mems: "0", Memory: "1g"},
	}}
	var mean [2]float64
	for i, floating := range []bool{false, true} {
		r, err := qualify.Qualify(context.Background(), qualify.Options{
			Plan: plan, Launcher: &qualify.Direct{Binary: bin}, Floating: floating, RepDuration: rep,
		})
		if err != nil {
			return err
		}
		for _, a := range r.Agents {
			if a.ShiftPercent == nil {
				return fmt.Errorf("agent %s: no shift measured", a.Name)
			}
			fmt.Printf("%-8s %s on CPUs %-4s quiet CV %5.2f %%  shift under load %+7.2f %%  steal %4.1f %%  %s\n",
				setup(floating), a.Name, a.CPUs, a.CVPercent, *a.ShiftPercent, a.StealPercent, a.Verdict)
			mean[i] += math.Abs(*a.ShiftPercent) / float64(len(r.Agents))
		}
	}
	fmt.Printf("floating/pinned shift ratio: %.1f (%.2f %% vs %.2f %%)\n", mean[1]/mean[0], mean[1], mean[0])
	return nil
}

func setup(floating bool) string {
	if floating {
		return "floating"
	}
	return "pinned"
}
