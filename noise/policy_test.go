package noise

import (
	"strings"
	"testing"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/mdtext/mdtexttest"
)

func TestDecideRetry(t *testing.T) {
	external := []Reason{{Run: "leaderboard", Source: "steal", External: true, Vouched: true, Message: "hypervisor steal 20.0 %"}}
	// What the container reports about itself: external, not vouched.
	claimed := []Reason{
		{Run: "leaderboard", Source: "nvidia", External: true, Message: "the GPU was already slowed before the run: sw_thermal_slowdown"},
		{Run: "leaderboard", Source: "foreign_processes", External: true, Message: "foreign processes took up to 40 % of CPUs 1: docker-init[1]"},
	}
	own := []Reason{{Run: "leaderboard", Source: "cgroup_throttling", Message: "throttled"}}
	for _, tc := range []struct {
		name    string
		retry   bool
		ranked  bool
		retries string
		reasons []Reason
		want    bool
		why     string
	}{
		{name: "first attempt, external", retry: true, ranked: true, retries: "0", reasons: external, want: true, why: "exit 75"},
		{name: "outside Buildkite counts as the first", retry: true, ranked: true, retries: "", reasons: external, want: true},
		{name: "second attempt: the result stands", retry: true, ranked: true, retries: "1", reasons: external, want: false, why: "already retry 1"},
		{name: "policy without retry", retry: false, ranked: true, retries: "0", reasons: external},
		{name: "benchmark mode is never retried", retry: true, ranked: false, retries: "0", reasons: external},
		{name: "own load is never retried", retry: true, ranked: true, retries: "0", reasons: own},
		{name: "clean", retry: true, ranked: true, retries: "0"},
		{name: "the container's own claims never retry", retry: true, ranked: true, retries: "0", reasons: claimed, why: "none of it is evidence the submission cannot fake"},
		{name: "vouched beside claimed: retried for the vouched", retry: true, ranked: true, retries: "0", reasons: append(claimed[:1:1], external...), want: true, why: "external noise (hypervisor steal 20.0 %): exit 75"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &Record{Policy: Policy{Retry: tc.retry}, Reasons: tc.reasons}
			if got := rec.DecideRetry(tc.ranked, tc.retries); got != tc.want || rec.Retry != tc.want {
				t.Errorf("DecideRetry = %v (Retry %v), want %v", got, rec.Retry, tc.want)
			}
			if !strings.Contains(rec.RetryReason, tc.why) {
				t.Errorf("RetryReason = %q, want %q in it", rec.RetryReason, tc.why)
			}
		})
	}
}

func TestMarkdownAndFile(t *testing.T) {
	rec := newScenario(t, "vm").run("leaderboard", Policy{Retry: true})
	rec.DecideRetry(true, "0")
	md := rec.Markdown()
	for _, want := range []string{
		"**noise**: noisy (steal 20.0 %, foreign CPU 15.0 %, noise.json)",
		"- `leaderboard` `steal` (external): `hypervisor steal 20.0 % on CPUs 1",
		"- retried: `external noise (",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	path := t.TempDir() + "/out/" + contract.NoiseFile
	if err := Write(path, rec); err != nil {
		t.Fatal(err)
	}
	back, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if back.Version != Version || back.Verdict != Noisy || !back.Retry || back.Runs["leaderboard"].Steal.StealPercent != 20 || len(back.Reasons) != 2 {
		t.Errorf("read back %+v", back)
	}
	if got := (&Record{Verdict: Clean, Attempt: 2}).Markdown(); !strings.Contains(got, "attempt 2: Buildkite ran this job again") {
		t.Errorf("a retried job's markdown does not say so: %q", got)
	}
	clean := (&Record{Verdict: Clean, Runs: map[string]*Run{"benchmark": {Steal: StealReport{Availability: Availability{Status: OK}, StealPercent: 0.4}}}}).Markdown()
	if clean != "**noise**: clean (steal 0.4 %, noise.json)\n" {
		t.Errorf("clean markdown = %q", clean)
	}
}

// TestMarkdownIsInert: a noise.json forged in the container (or a
// foreign process named to attack) cannot put a link, an image or HTML in
// the annotation, nor a line of its own.
func TestMarkdownIsInert(t *testing.T) {
	t.Parallel()
	for name, s := range mdtexttest.Hostile {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rec := &Record{Verdict: Verdict(s), Retry: true, RetryReason: s, Reasons: []Reason{{Run: s, Source: s, External: true, Message: s}}}
			md := rec.Markdown()
			mdtexttest.Inert(t, mdtexttest.Render(t, md), -1)
			if n := strings.Count(md, "\n"); n != 3 {
				t.Errorf("%d lines, want 3:\n%s", n, md)
			}
		})
	}
}
