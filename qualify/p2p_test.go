package qualify

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/node"
)

// TestJudgeP2P: the verdict on fixture numbers, per link kind: the floor
// comes from the set's slowest link, and on a fabric peer access must be
// on.
func TestJudgeP2P(t *testing.T) {
	t.Parallel()
	pair := func(gbps float64, peer bool) P2PPair {
		return P2PPair{From: "GPU-a", To: "GPU-b", Peer: peer, GBps: gbps}
	}
	tests := []struct {
		name     string
		link     string
		pairs    []P2PPair
		wantMin  float64
		wantWhy  []string // substrings, one per reason, in order
		wantPass bool
	}{
		{name: "nvswitch healthy", link: "NVLink/NVSwitch (NV18)", pairs: []P2PPair{pair(380, true), pair(371.5, true)}, wantMin: MinP2PNVLinkGBps, wantPass: true},
		{name: "nvswitch through the host", link: "NVLink/NVSwitch (NV18)", pairs: []P2PPair{pair(380, true), pair(24.2, false)},
			wantMin: MinP2PNVLinkGBps, wantWhy: []string{"peer access off on a NVLink/NVSwitch (NV18) set", "24.2 GB/s < 100 GB/s"}},
		{name: "xgmi healthy", link: "xGMI", pairs: []P2PPair{pair(48, true)}, wantMin: MinP2PXGMIGBps, wantPass: true},
		{name: "xgmi slow link", link: "xGMI", pairs: []P2PPair{pair(12, true)}, wantMin: MinP2PXGMIGBps, wantWhy: []string{"12.0 GB/s < 30 GB/s (xGMI)"}},
		{name: "pcie without peer access passes", link: "PCIe (SYS)", pairs: []P2PPair{pair(11, false)}, wantMin: MinP2PPCIeGBps, wantPass: true},
		{name: "pcie narrow", link: "PCIe (PIX)", pairs: []P2PPair{pair(3.9, true)}, wantMin: MinP2PPCIeGBps, wantWhy: []string{"3.9 GB/s < 8 GB/s (PCIe (PIX))"}},
		{name: "nothing measured", link: "PCIe (PIX)", wantMin: MinP2PPCIeGBps, wantWhy: []string{"no pair was measured"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := JudgeP2P(tc.link, tc.pairs)
			if r.MinGBps != tc.wantMin || (r.Verdict == Pass) != tc.wantPass || len(r.Why) != len(tc.wantWhy) {
				t.Fatalf("JudgeP2P(%q) = floor %g, %s %q; want floor %g, pass %v, %d reasons", tc.link, r.MinGBps, r.Verdict, r.Why, tc.wantMin, tc.wantPass, len(tc.wantWhy))
			}
			for i, w := range tc.wantWhy {
				if !strings.Contains(r.Why[i], w) {
					t.Errorf("reason %d %q lacks %q", i, r.Why[i], w)
				}
			}
		})
	}
}

// TestPairsOf: the script's device indexes become the set's UUIDs; an
// index outside the set or no JSON is an error.
func TestPairsOf(t *testing.T) {
	t.Parallel()
	set := []node.GPU{{Index: 4, UUID: "GPU-4"}, {Index: 5, UUID: "GPU-5"}}
	tests := []struct {
		name    string
		out     string
		want    []P2PPair
		wantErr error
	}{
		{name: "both directions", out: `{"pairs": [{"from": 0, "to": 1, "peer": true, "gbps": 371.456}, {"from": 1, "to": 0, "peer": true, "gbps": 369.2}]}`,
			want: []P2PPair{{From: "GPU-4", To: "GPU-5", Peer: true, GBps: 371.46}, {From: "GPU-5", To: "GPU-4", Peer: true, GBps: 369.2}}},
		{name: "index outside the set", out: `{"pairs": [{"from": 0, "to": 2, "peer": true, "gbps": 1}]}`, wantErr: &p2pDeviceError{From: 0, To: 2, Of: 2}},
		{name: "a pair with itself", out: `{"pairs": [{"from": 1, "to": 1, "peer": true, "gbps": 1}]}`, wantErr: &p2pDeviceError{From: 1, To: 1, Of: 2}},
		{name: "not json", out: "Traceback (most recent call last):\n", wantErr: errNoP2PResult},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := pairsOf([]byte(tc.out), set)
			var de *p2pDeviceError
			switch want, ok := tc.wantErr.(*p2pDeviceError); {
			case ok && (!errors.As(err, &de) || *de != *want):
				t.Fatalf("pairsOf: %v; want %v", err, want)
			case tc.wantErr != nil && !ok && !errors.Is(err, tc.wantErr):
				t.Fatalf("pairsOf: %v; want %v", err, tc.wantErr)
			case tc.wantErr != nil:
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("pairsOf = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

// TestGPUPartP2P: a multi-GPU agent's GPU part adds the peer-to-peer
// check, with every GPU of its set visible to one process; a stand-in
// python3 plays torch, one direction through the host.
func TestGPUPartP2P(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	py := dir + "/python3"
	script := `#!/bin/sh
# stand-in python3 -c SCRIPT calibrate RUNS REPS WINDOW_MS SIZE | p2p MIB REPS
shift 2
if [ "$1" = p2p ]; then
	echo "$CUDA_VISIBLE_DEVICES $HIP_VISIBLE_DEVICES $2 $3" > "` + dir + `/p2p"
	echo '{"pairs": [{"from": 0, "to": 1, "peer": true, "gbps": 380}, {"from": 1, "to": 0, "peer": false, "gbps": 20}]}'
	exit 0
fi
echo '{"device": "Stand-in GPU", "matmuls_per_sample": 50, "runs": [{"mean_ms": 1.0}, {"mean_ms": 1.0}]}'
`
	if err := os.WriteFile(py, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	set := []node.GPU{{Index: 0, UUID: "GPU-00000000-0000-0000-0000-000000000000"}, {Index: 1, UUID: "GPU-11111111-1111-1111-1111-111111111111"}}
	plan := &node.Plan{Runtime: "nvidia", HostCPUs: "0", CgroupVersion: 1, Agents: []node.Agent{
		{ID: "gpux2-0", GPU: set[0], GPUs: set, Link: "NVLink/NVSwitch (NV18)", CPUSet: "1", Mems: "0", Memory: "1g", Queue: "nvidia-h100x2"},
	}}
	f := &fakeLauncher{quiet: map[string][]float64{"gpux2-0": {10, 10}}, loaded: map[string][]float64{"gpux2-0": {10, 10}}}
	r, err := Qualify(context.Background(), Options{Plan: plan, Launcher: f, Iterations: 1, GPU: &GPURunner{Python: py, Env: []string{"PATH=/usr/bin:/bin"}}})
	if err != nil {
		t.Fatal(err)
	}
	g := r.Agents[0].GPU
	if g == nil || g.P2P == nil || len(g.P2P.Pairs) != 2 || g.P2P.Verdict != Fail || g.Verdict != Fail || r.Agents[0].Verdict != Fail || r.Pass {
		t.Fatalf("GPU part = %+v, p2p %+v: want two pairs and a failing agent", g, g.P2P)
	}
	if why := strings.Join(r.Agents[0].Why, "; "); !strings.Contains(why, "GPU-11111111-1111-1111-1111-111111111111 → GPU-00000000-0000-0000-0000-000000000000: peer access off") || !strings.Contains(why, "20.0 GB/s < 100 GB/s") {
		t.Errorf("agent's reasons %q: want the slow direction named, peer access off and under the NVLink floor", why)
	}
	seen, _ := os.ReadFile(dir + "/p2p")
	if want := "GPU-00000000-0000-0000-0000-000000000000,GPU-11111111-1111-1111-1111-111111111111 0,1 256 5\n"; string(seen) != want {
		t.Errorf("p2p ran with %q; want the whole set visible and MIB REPS: %q", seen, want)
	}
}

// TestGPUPartSharedGPUs: on a node whose GPUs have a one-GPU agent each
// and a two-GPU agent over both, every GPU of the set is calibrated, and
// a loaded block never loads a GPU of the agent being measured (the
// other agents of its own GPUs). A stand-in python3 logs each call with
// the GPU it was given.
func TestGPUPartSharedGPUs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	py := dir + "/python3"
	script := `#!/bin/sh
shift 2
echo "$1 $CUDA_VISIBLE_DEVICES" >> "` + dir + `/calls"
case "$1" in
load) exec sleep "$2" ;;
p2p) echo '{"pairs": [{"from": 0, "to": 1, "peer": true, "gbps": 380}, {"from": 1, "to": 0, "peer": true, "gbps": 380}]}' ;;
*) echo '{"device": "Stand-in GPU", "matmuls_per_sample": 50, "runs": [{"mean_ms": 1.0}, {"mean_ms": 1.0}]}' ;;
esac
`
	if err := os.WriteFile(py, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	g0, g1 := node.GPU{Index: 0, UUID: "GPU-0"}, node.GPU{Index: 1, UUID: "GPU-1"}
	plan := &node.Plan{Runtime: "nvidia", HostCPUs: "0", CgroupVersion: 1, Agents: []node.Agent{
		{ID: "gpu0", GPU: g0, CPUSet: "1", Mems: "0", Memory: "1g"},
		{ID: "gpu1", GPU: g1, CPUSet: "2", Mems: "0", Memory: "1g"},
		{ID: "gpux2-0", GPU: g0, GPUs: []node.GPU{g0, g1}, Link: "NVLink/NVSwitch (NV18)", CPUSet: "1-2", Mems: "0", Memory: "1g", Queue: "nvidia-h100x2"},
	}}
	flat := []float64{10, 10}
	f := &fakeLauncher{quiet: map[string][]float64{"gpu0": flat, "gpu1": flat, "gpux2-0": flat}, loaded: map[string][]float64{"gpu0": flat, "gpu1": flat, "gpux2-0": flat}}
	r, err := Qualify(context.Background(), Options{Plan: plan, Launcher: f, Iterations: 1, Settle: 50 * time.Millisecond, GPU: &GPURunner{Python: py, Env: []string{"PATH=/usr/bin:/bin"}}})
	if err != nil {
		t.Fatal(err)
	}
	shape := r.Agents[2].GPU
	if shape == nil || len(shape.Set) != 1 || shape.LoadSkipped == "" || shape.P2P == nil || shape.Verdict != Pass {
		t.Fatalf("two-GPU agent's GPU part = %+v: want its second GPU in Set, no load (no GPU outside its set), p2p, pass", shape)
	}
	data, err := os.ReadFile(dir + "/calls")
	if err != nil {
		t.Fatal(err)
	}
	// Each calibrate's loads are the load lines since the one before.
	var loads []string
	calibrated := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		mode, gpu, _ := strings.Cut(line, " ")
		switch mode {
		case "load":
			loads = append(loads, gpu)
		case "calibrate":
			if slices.Contains(loads, gpu) {
				t.Errorf("GPU %s calibrated while a load ran on it (loads %v)", gpu, loads)
			}
			calibrated[gpu]++
			loads = nil
		}
	}
	// gpu0 and gpu1: a quiet and a loaded block each, twice; gpux2-0: one
	// quiet block on each GPU of its set.
	if calibrated["GPU-0"] != 2*GPUBlocks+1 || calibrated["GPU-1"] != 2*GPUBlocks+1 {
		t.Errorf("calibrations per GPU %v; want %d each", calibrated, 2*GPUBlocks+1)
	}
}
