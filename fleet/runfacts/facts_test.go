package runfacts

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	exit := 75
	f := Facts{Agent: "h100-0", Queue: "nvidia-h100", Node: "node1", GPUUUIDs: []string{"GPU-1"}, GPUModel: "NVIDIA H100 80GB HBM3",
		Driver: "550.54.15", ImageDigest: "sha256:ab", KbgenVersion: "v1.2.3", Noise: "noisy", NoiseReasons: []string{"steal 9 %"}, Attempt: 1, Exit: &exit, Xids: 2, ClockEventSeconds: 1.5}
	v, err := Encode("job-1", f)
	if err != nil {
		t.Fatal(err)
	}
	got, job, err := Decode(v)
	if err != nil || job != "job-1" {
		t.Fatalf("job %q, %v", job, err)
	}
	f.Version = Version
	if d := cmp.Diff(f, got); d != "" {
		t.Errorf("round trip (-want +got):\n%s", d)
	}
}

// TestFromMetaData: each attempt's key is read, in order, with its
// attempt from the key; a bad one, or one the reader does not vouch
// for, is skipped and reported.
func TestFromMetaData(t *testing.T) {
	t.Parallel()
	one, _ := Encode("job-1", Facts{Agent: "a"})
	two, _ := Encode("job-2", Facts{Agent: "b"})
	forged, _ := Encode("job-4", Facts{Agent: "someone-else"})
	var asked []string
	vouch := func(job string, f Facts) error {
		asked = append(asked, job+"="+f.Agent)
		if job == "job-4" {
			return errors.New("not job-4's agent")
		}
		return nil
	}
	all, errs := FromMetaData(map[string]string{Key(2): two, Key(1): one, Key(3): "x", Key(4): forged, "kbgen_result": "y"}, vouch)
	if len(all) != 2 || all[0].Agent != "a" || all[0].Attempt != 1 || all[1].Agent != "b" || all[1].Attempt != 2 {
		t.Errorf("facts %+v", all)
	}
	if want := []string{"job-1=a", "job-2=b", "job-4=someone-else"}; !slices.Equal(asked, want) {
		t.Errorf("vouch asked about %v, want %v (each readable attempt with its stamp)", asked, want)
	}
	var bad, refused *AttemptError
	if len(errs) != 2 || !errors.As(errs[0], &bad) || bad.Attempt != 3 || !errors.As(errs[1], &refused) || refused.Attempt != 4 {
		t.Fatalf("errors %v, want attempt 3's and attempt 4's", errs)
	}
	// The text is the contract: the service's log names the meta-data key to look at.
	if !strings.HasPrefix(errs[0].Error(), Key(3)+": run facts: ") {
		t.Errorf("error %q, want it to name %s", errs[0], Key(3))
	}
}

func TestDecodeRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, v string
		want    error
	}{
		{"empty", "", ErrNone},
		{"unstamped", `{"version":1}`, nil},
		{"empty stamp", `:{"version":1}`, nil},
		{"not json", "job-1:{", nil},
		{"other version", `job-1:{"version":9}`, nil},
		{"too large", "job-1:" + strings.Repeat("x", MaxBytes+1), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, _, err := Decode(tc.v)
			if err == nil {
				t.Fatal("decoded")
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("error %v, want %v", err, tc.want)
			}
		})
	}
}

func TestCleanBounds(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", 200)
	var many []string
	for range 40 {
		many = append(many, "GPU-x")
	}
	f := Facts{Agent: "a\nb\x00c" + long, GPUUUIDs: many, NoiseReasons: many, Xids: -3, ClockEventSeconds: -1}.Clean()
	if strings.ContainsAny(f.Agent, "\n\x00") || len(f.Agent) > maxField || !strings.HasPrefix(f.Agent, "abc") {
		t.Errorf("agent not cleaned: %q", f.Agent)
	}
	if len(f.GPUUUIDs) != maxList || len(f.NoiseReasons) != maxReasons {
		t.Errorf("lists not cut: %d %d", len(f.GPUUUIDs), len(f.NoiseReasons))
	}
	if f.Xids != 0 || f.ClockEventSeconds != 0 {
		t.Errorf("negative numbers kept: %d %g", f.Xids, f.ClockEventSeconds)
	}
	if _, err := Encode("bad:job", f); err == nil {
		t.Error("a job id with the separator stamped facts")
	}
}

// TestText: what an agent host writes is kept as text a reader sees as
// it is: no control or format character survives, and the cut never
// splits a character.
func TestText(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in string
		n        int
		want     string
	}{
		{"plain", "node1-gpu0", 128, "node1-gpu0"},
		{"C0 and DEL", "gpu\n0\x1b[31m\x7f", 128, "gpu0[31m"},
		{"C1 (CSI)", "gpu\u009b31m0", 128, "gpu31m0"},
		{"a right-to-left override", "gpu\u202e0u", 128, "gpu0u"},
		{"bidi isolates and zero-width", "\u2066gpu\u200b0\u2069\ufeff", 128, "gpu0"},
		{"invalid UTF-8", "gpu\xff0", 128, "gpu0"},
		{"cut on a character's start", "gpüu", 3, "gp"},
		{"non-Latin names stay", "узел-1", 128, "узел-1"},
	} {
		if got := Text(tc.in, tc.n); got != tc.want {
			t.Errorf("%s: Text(%q, %d) = %q, want %q", tc.name, tc.in, tc.n, got, tc.want)
		}
	}
}
