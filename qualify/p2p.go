package qualify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gpu-mode/kbgen/node"
)

// The peer-to-peer floors, GB/s of one GPU-to-GPU copy, by the slowest
// link of a multi-GPU agent's set (node.Agent.Link). Floors, not
// targets: they catch a set whose copies go the slow way (peer access
// off, staged through host memory, a link down or a card trained at a
// lower PCIe width), far below what each link carries when healthy.
//   - NVLink/NVSwitch: an H100 SXM has 18 NVLink4 links, 450 GB/s each
//     way; staging through the host over PCIe 5 gets at most ~50.
//   - xGMI: an MI300X link carries 64 GB/s each way; PCIe through the
//     host again stays well under.
//   - PCIe: a Gen3 x16 peer copy gets ~10-12 GB/s, Gen4 ~20-25; below
//     8 the path is narrower than x16 Gen3.
//
// Not yet measured on a multi-GPU machine (none was lent): the numbers
// are from the vendors' link specifications, and the GPU checklist in
// docs/testing.md records the first real run.
const (
	MinP2PNVLinkGBps = 100
	MinP2PXGMIGBps   = 30
	MinP2PPCIeGBps   = 8
)

// P2PCopyMB is the size of one timed copy: large enough that the copy's
// launch is noise beside it.
const P2PCopyMB = 256

// P2PPair is one direction between two GPUs of a set.
type P2PPair struct {
	From string  `json:"from"`
	To   string  `json:"to"`
	Peer bool    `json:"peer"` // the runtime reports peer access
	GBps float64 `json:"gbps"` // the best of the timed copies
}

// P2PResult is a multi-GPU agent's peer-to-peer check.
type P2PResult struct {
	Link    string    `json:"link"`
	MinGBps float64   `json:"min_gbps"`
	Pairs   []P2PPair `json:"pairs"`
	Verdict Verdict   `json:"verdict"`
	Why     []string  `json:"why,omitempty"`
}

// p2pFloor is the floor for a set whose slowest link is link, and
// whether the link is a GPU fabric (on which peer access must be on).
func p2pFloor(link string) (gbps float64, fabric bool) {
	switch {
	case strings.HasPrefix(link, "NVLink"):
		return MinP2PNVLinkGBps, true
	case strings.HasPrefix(link, "xGMI"):
		return MinP2PXGMIGBps, true
	}
	return MinP2PPCIeGBps, false
}

// JudgeP2P is the verdict on a set's measured pairs: every direction at
// or above the link's floor and, on a fabric, with peer access on.
func JudgeP2P(link string, pairs []P2PPair) P2PResult {
	floor, fabric := p2pFloor(link)
	r := P2PResult{Link: link, MinGBps: floor, Pairs: pairs}
	if len(pairs) == 0 {
		r.Why = append(r.Why, "peer-to-peer: no pair was measured")
	}
	for _, p := range pairs {
		if fabric && !p.Peer {
			r.Why = append(r.Why, fmt.Sprintf("peer-to-peer %s → %s: peer access off on a %s set", p.From, p.To, link))
		}
		if p.GBps < floor {
			r.Why = append(r.Why, fmt.Sprintf("peer-to-peer %s → %s: %.1f GB/s < %g GB/s (%s)", p.From, p.To, p.GBps, floor, link))
		}
	}
	r.Verdict = verdictOf(r.Why)
	return r
}

// p2pOutput is what gpu_calibrate.py's p2p mode prints: devices by their
// index among the visible ones (the set, in order).
type p2pOutput struct {
	Pairs []struct {
		From int     `json:"from"`
		To   int     `json:"to"`
		Peer bool    `json:"peer"`
		GBps float64 `json:"gbps"`
	} `json:"pairs"`
}

// errNoP2PResult is the peer-to-peer script's output with no JSON in it
// (a Python traceback, torch missing).
var errNoP2PResult = errors.New("the peer-to-peer check printed no result")

// p2pDeviceError is a pair the script measured that is not two devices of
// the set it was given.
type p2pDeviceError struct{ From, To, Of int }

func (e *p2pDeviceError) Error() string {
	return fmt.Sprintf("the peer-to-peer check named devices %d → %d of a set of %d", e.From, e.To, e.Of)
}

// pairsOf names the measured pairs by the set's GPU UUIDs.
func pairsOf(out []byte, set []node.GPU) ([]P2PPair, error) {
	var p p2pOutput
	if err := json.Unmarshal(out, &p); err != nil {
		return nil, fmt.Errorf("%w: %q", errNoP2PResult, firstLine(string(out)))
	}
	var pairs []P2PPair
	for _, q := range p.Pairs {
		if q.From < 0 || q.From >= len(set) || q.To < 0 || q.To >= len(set) || q.From == q.To {
			return nil, &p2pDeviceError{From: q.From, To: q.To, Of: len(set)}
		}
		pairs = append(pairs, P2PPair{From: set[q.From].UUID, To: set[q.To].UUID, Peer: q.Peer, GBps: round2(q.GBps)})
	}
	return pairs, nil
}

// p2p measures every ordered pair of a multi-GPU agent's set, all of its
// GPUs visible to one process (as the job's ranks see them).
func (g *GPURunner) p2p(ctx context.Context, a node.Agent) ([]P2PPair, error) {
	// HIP_VISIBLE_DEVICES counts within what CUDA_VISIBLE_DEVICES left
	// visible, as cmd's "0" for one GPU does.
	uuids, visible := make([]string, len(a.GPUs)), make([]string, len(a.GPUs))
	for i, gpu := range a.GPUs {
		uuids[i], visible[i] = gpu.UUID, strconv.Itoa(i)
	}
	cmd := g.cmd(ctx, a, "p2p", strconv.Itoa(P2PCopyMB), "5")
	cmd.Env = append(slices.Clone(g.Env), "CUDA_VISIBLE_DEVICES="+strings.Join(uuids, ","), "HIP_VISIBLE_DEVICES="+strings.Join(visible, ","))
	out, err := run(cmd)
	if err != nil {
		return nil, err
	}
	return pairsOf(out, a.GPUs)
}

// qualifyP2P is the peer-to-peer check of a multi-GPU agent.
func (o *Options) qualifyP2P(ctx context.Context, a node.Agent) *P2PResult {
	o.logf("%s: peer-to-peer copies (%d MiB) between the %d GPUs of its set (%s)", a.ID, P2PCopyMB, len(a.GPUs), a.Link)
	pairs, err := o.GPU.p2p(ctx, a)
	if err != nil {
		floor, _ := p2pFloor(a.Link)
		return &P2PResult{Link: a.Link, MinGBps: floor, Verdict: Fail, Why: []string{"peer-to-peer: " + err.Error()}}
	}
	r := JudgeP2P(a.Link, pairs)
	return &r
}
