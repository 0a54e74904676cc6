package runfacts

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	f := Facts{Agent: "h100-0", Queue: "nvidia-h100", Node: "node1", GPUUUIDs: []string{"GPU-1"}, GPUModel: "NVIDIA H100 80GB HBM3",
		Driver: "550.54.15", ImageDigest: "sha256:ab", KbgenVersion: "v1.2.3", Noise: "noisy", NoiseReasons: []string{"steal 9 %"}, ExitCode: 75, Xids: 2, ClockEventSeconds: 1.5}
	v, err := Encode("job-1", f)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(v, "job-1")
	if err != nil {
		t.Fatal(err)
	}
	f.Version = Version
	if d := cmp.Diff(f, got); d != "" {
		t.Errorf("round trip (-want +got):\n%s", d)
	}
}

func TestDecodeRefuses(t *testing.T) {
	t.Parallel()
	good, _ := Encode("job-1", Facts{Agent: "a"})
	for _, tc := range []struct {
		name, v, job string
		want         error
	}{
		{"empty", "", "job-1", ErrNone},
		{"earlier attempt", good, "job-2", ErrStale},
		{"unstamped", `{"version":1}`, "job-1", nil},
		{"not json", "job-1:{", "job-1", nil},
		{"other version", `job-1:{"version":9}`, "job-1", nil},
		{"too large", "job-1:" + strings.Repeat("x", MaxBytes+1), "job-1", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Decode(tc.v, tc.job)
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
