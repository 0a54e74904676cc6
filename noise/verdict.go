package noise

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gpu-mode/kbgen/internal/mdtext"
	"github.com/gpu-mode/kbgen/internal/xid"
)

// Record judges every run recorded so far against p.
func (s *Sampler) Record(p Policy) *Record {
	p = p.WithDefaults()
	s.mu.Lock()
	defer s.mu.Unlock()
	rec := &Record{Version: Version, Verdict: Clean, Reasons: []Reason{}, Policy: p, Runs: map[string]*Run{}, CostMS: round2(float64(s.cost) / 1e6)}
	for _, key := range s.order {
		run := s.runs[key]
		reasons := Judge(key, run, p)
		// Only external noise makes a run noisy: what the job's own load
		// causes (its cgroup throttled, its GPU boosting into the power
		// cap) is part of its measurement, never retried, so it stays in
		// the reasons with external false and the verdict stays clean.
		run.Verdict = Clean
		if slices.ContainsFunc(reasons, func(x Reason) bool { return x.External }) {
			run.Verdict = Noisy
			rec.Verdict = Noisy
		}
		rec.Reasons = append(rec.Reasons, reasons...)
		rec.Runs[key] = run
	}
	return rec
}

// Judge lists what made run key noisy under p.
func Judge(key string, r *Run, p Policy) []Reason {
	var out []Reason
	add := func(source string, external bool, format string, args ...any) {
		out = append(out, Reason{Run: key, Source: source, External: external, Message: fmt.Sprintf(format, args...)})
	}
	if r.Steal.Status == OK && r.Steal.StealPercent > p.MaxStealPercent {
		add("steal", true, "hypervisor steal %.1f %% on CPUs %s (threshold %g %%)", r.Steal.StealPercent, r.CPUs, p.MaxStealPercent)
		// /proc/stat's steal is the kernel's count of what the hypervisor
		// took; no process can write or cause it.
		out[len(out)-1].Vouched = true
	}
	if f := r.Foreign; f.Status == OK && f.CPUPercent > p.MaxForeignPercent {
		names := make([]string, 0, len(f.Top))
		for _, t := range f.Top {
			names = append(names, fmt.Sprintf("%s[%d]", t.Comm, t.PID))
		}
		add("foreign_processes", true, "foreign processes took up to %.1f %% of CPUs %s (threshold %g %%): %s", f.CPUPercent, r.CPUs, p.MaxForeignPercent, strings.Join(names, ", "))
	}
	if t := r.Throttling; t.Status == OK && t.Throttled > 0 {
		add("cgroup_throttling", false, "the job's cgroup was throttled in %d of %d CPU periods (%.0f ms) under its own load", t.Throttled, t.Periods, t.ThrottledMS)
	}
	out = append(out, judgeNVIDIA(key, "", r.NVIDIA)...)
	for _, peer := range r.NVIDIAPeers {
		out = append(out, judgeNVIDIA(key, "GPU "+peer.UUID+": ", peer)...)
	}
	return out
}

// judgeNVIDIA is one GPU's reasons; a peer's messages name it (prefix).
func judgeNVIDIA(key, prefix string, g NVIDIAReport) []Reason {
	if g.Status != OK {
		return nil
	}
	var out []Reason
	add := func(external bool, format string, args ...any) {
		out = append(out, Reason{Run: key, Source: "nvidia", External: external, Message: prefix + fmt.Sprintf(format, args...)})
	}
	if len(g.ForeignProcesses) > 0 {
		var names []string
		for _, p := range g.ForeignProcesses {
			names = append(names, fmt.Sprintf("%s[%d]", p.Name, p.PID))
		}
		add(true, "other compute processes on the GPU: %s", strings.Join(names, ", "))
	}
	if d := g.ECCUncorrectedDelta; d != nil && *d > 0 {
		add(true, "%d new uncorrected ECC errors during the run", *d)
	}
	for _, x := range g.Xids {
		if xid.ByProgram(x) {
			add(false, "the program raised Xid %d during the run (its own fault)", x)
		} else {
			add(true, "Xid %d on the GPU during the run: the machine's fault", x)
		}
	}
	if g.Before != nil {
		if ev := events(g.Before.EventReasons, eventLoad, eventExternal); len(ev) > 0 {
			add(true, "the GPU was already slowed before the run: %s", strings.Join(ev, ", "))
		}
	}
	if g.After != nil {
		if ev := events(g.After.EventReasons, eventExternal); len(ev) > 0 {
			add(true, "external clock events at the end of the run: %s", strings.Join(ev, ", "))
		}
		if ev := events(g.After.EventReasons, eventLoad); len(ev) > 0 {
			add(false, "clock events under the job's own load: %s", strings.Join(ev, ", "))
		}
	}
	var grew []string
	for k, v := range g.EventCounters {
		if v > 0 && eventKindOf(k) != eventSetting {
			grew = append(grew, fmt.Sprintf("%s +%g us", k, v))
		}
	}
	if len(grew) > 0 {
		slices.Sort(grew)
		add(false, "clock-event counters grew during the run: %s", strings.Join(grew, ", "))
	}
	return out
}

// events keeps the reasons of the given kinds.
func events(reasons []string, kinds ...eventKind) []string {
	var out []string
	for _, r := range reasons {
		if slices.Contains(kinds, eventKindOf(r)) {
			out = append(out, r)
		}
	}
	return out
}

// External reports whether any reason is external noise.
func (r *Record) External() bool {
	return slices.ContainsFunc(r.Reasons, func(x Reason) bool { return x.External })
}

// DecideRetry sets Retry when the policy allows one: vouched external
// noise (evidence the submission cannot fake: Reason.Vouched), a ranked
// run (leaderboard or private), and the job's first attempt (retries is
// BUILDKITE_RETRY_COUNT; "" counts as the first). External noise that is
// not vouched never retries, and the record says so. It reports the
// decision.
func (r *Record) DecideRetry(ranked bool, retries string) bool {
	var vouched []string
	for _, x := range r.Reasons {
		if x.External && x.Vouched {
			vouched = append(vouched, x.Message)
		}
	}
	switch {
	case !r.Policy.Retry || !ranked || !r.External():
		return false
	case len(vouched) == 0:
		r.RetryReason = "external noise, but none of it is evidence the submission cannot fake (only steal and the host's own view are): the result stands"
		return false
	case retries != "" && retries != "0":
		r.RetryReason = "external noise, but this is already retry " + retries + ": the result stands"
		return false
	}
	r.Retry = true
	r.RetryReason = "external noise (" + strings.Join(vouched, "; ") + "): exit 75 so Buildkite runs the job again on another agent"
	return true
}

// SetAttempt records the attempt from retries (BUILDKITE_RETRY_COUNT; ""
// or unreadable is the first).
func (r *Record) SetAttempt(retries string) {
	n, err := strconv.Atoi(retries)
	if err != nil || n < 0 {
		n = 0
	}
	r.Attempt = n + 1
}

// Markdown is the record's line in the build annotation; "" for no record.
func (r *Record) Markdown() string {
	if r == nil {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "**noise**: %s (%s)", verdictText(r.Verdict), r.summary())
	for _, x := range r.Reasons {
		who := "the job's own load"
		if x.External {
			who = "external"
		}
		fmt.Fprintf(&b, "\n- %s %s (%s): %s", mdtext.Code(x.Run), mdtext.Code(x.Source), who, mdtext.Code(x.Message))
	}
	if r.Retry {
		b.WriteString("\n- retried: " + mdtext.Code(r.RetryReason))
	} else if r.RetryReason != "" {
		b.WriteString("\n- not retried: " + mdtext.Code(r.RetryReason))
	}
	if r.Attempt > 1 {
		fmt.Fprintf(&b, "\n- attempt %d: Buildkite ran this job again after an earlier attempt exited 75 or lost its agent; each attempt's noise.json and result.json say why", r.Attempt)
	}
	return b.String() + "\n"
}

// summary is the headline numbers: worst steal and foreign share.
func (r *Record) summary() string {
	steal, foreign := -1.0, -1.0
	for _, run := range r.Runs {
		if run.Steal.Status == OK {
			steal = max(steal, run.Steal.StealPercent)
		}
		if run.Foreign.Status == OK {
			foreign = max(foreign, run.Foreign.CPUPercent)
		}
	}
	var parts []string
	if steal >= 0 {
		parts = append(parts, fmt.Sprintf("steal %.1f %%", steal))
	}
	if foreign >= 0 {
		parts = append(parts, fmt.Sprintf("foreign CPU %.1f %%", foreign))
	}
	if r.Host != nil && r.Host.Foreign.Status == OK {
		parts = append(parts, fmt.Sprintf("host-seen foreign CPU %.1f %% over the whole job", r.Host.Foreign.CPUPercent))
	}
	parts = append(parts, "noise.json")
	return strings.Join(parts, ", ")
}

// verdictText is v as the annotation shows it: a noise.json read back
// from the container could hold any string there.
func verdictText(v Verdict) string {
	if v == Clean || v == Noisy {
		return string(v)
	}
	return mdtext.Code(string(v))
}
