package canary

import "math"

// Offset is an agent's median against the median of the agents of its
// hardware fingerprint: a steady offset is a slow (or fast) machine, not
// drift, and the one number a vendor can act on.
type Offset struct {
	Agent       string  `json:"agent"`
	Fingerprint string  `json:"fingerprint"`
	Median      float64 `json:"median"`
	PeerMedian  float64 `json:"peer_median"`
	// Change is (Median - PeerMedian) / PeerMedian.
	Change float64 `json:"change"`
	// Peers is how many agents (this one included) the peer median is of;
	// with 1 there is nothing to compare with and Change is 0.
	Peers int `json:"peers"`
	// Off is the canary rule's verdict on the offset: at least the offset
	// floor (Options.OffsetFloor, --canary-offset-floor) away from its
	// peers, among at least MinOffPeers
	// agents (of two, each is as far off the other: which is the slow one
	// is not known). The canary_drift alarm, the
	// dashboard and kbgen_canary_offset_flagged all read this.
	Off bool `json:"off"`
}

// MinOffPeers is the fewest agents of a fingerprint whose median can
// judge one of them off.
const MinOffPeers = 3

// Offsets compares each assessed agent with the others of its
// fingerprint, under the options the assessments were judged with;
// agents still baselining are left out of the peer medians and of the
// result.
func Offsets(as []Assessment, opt Options) []Offset {
	opt = opt.withDefaults()
	medians := map[string][]float64{}
	for _, a := range as {
		if a.State != Baselining {
			medians[a.Fingerprint] = append(medians[a.Fingerprint], a.Median)
		}
	}
	var out []Offset
	for _, a := range as {
		if a.State == Baselining {
			continue
		}
		peers := medians[a.Fingerprint]
		o := Offset{Agent: a.Agent, Fingerprint: a.Fingerprint, Median: a.Median, PeerMedian: Median(peers), Peers: len(peers)}
		if o.Peers > 1 && o.PeerMedian != 0 {
			o.Change = (o.Median - o.PeerMedian) / o.PeerMedian
			o.Off = o.Peers >= MinOffPeers && math.Abs(o.Change) >= opt.OffsetFloor
		}
		out = append(out, o)
	}
	return out
}
