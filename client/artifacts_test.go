package client

import (
	"testing"

	"github.com/gpu-mode/kbgen/payload"
)

func TestFindResult(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		as   []Artifact
		want string // DownloadURL of the pick, "" for none
	}{
		{"none", []Artifact{{Path: "profile_data/a.zip", State: "finished", DownloadURL: "p"}}, ""},
		{"one", []Artifact{{Path: "result.json", State: "finished", DownloadURL: "a"}}, "a"},
		{"nested name is not the result", []Artifact{{Path: "x/result.json", State: "finished", DownloadURL: "x"}}, ""},
		{"later finished wins", []Artifact{{Path: "result.json", State: "finished", DownloadURL: "a"}, {Path: "result.json", State: "finished", DownloadURL: "b"}}, "b"},
		{"finished beats in progress", []Artifact{{Path: "result.json", State: "finished", DownloadURL: "a"}, {Path: "result.json", State: "new", DownloadURL: "b"}}, "a"},
		{"in progress beats nothing", []Artifact{{Path: "result.json", State: "new", DownloadURL: "b"}}, "b"},
		// artifacts.md: an artifact past its retention is "expired", its
		// file gone.
		{"expired skipped", []Artifact{{Path: "result.json", State: "finished", DownloadURL: "a"}, {Path: "result.json", State: "expired", DownloadURL: "b"}}, "a"},
		{"only expired: none", []Artifact{{Path: "result.json", State: "expired", DownloadURL: "b"}}, ""},
		{"errored and deleted skipped", []Artifact{{Path: "result.json", State: "error", DownloadURL: "a"}, {Path: "./result.json", State: "deleted", DownloadURL: "b"}}, ""},
	}
	for _, tt := range tests {
		got := FindResult(tt.as)
		switch {
		case tt.want == "" && got != nil:
			t.Errorf("%s: picked %q, want none", tt.name, got.DownloadURL)
		case tt.want != "" && (got == nil || got.DownloadURL != tt.want):
			t.Errorf("%s: picked %v, want %q", tt.name, got, tt.want)
		}
	}
}

// TestLinkProfiles: each profile run's download_url becomes its own
// profile_data/<run>.zip artifact's REST download_url; a run without a
// usable zip, a run without a profile, and a URL already set are left.
func TestLinkProfiles(t *testing.T) {
	t.Parallel()
	set := "https://kept.example/p"
	res := &payload.FullResult{Runs: map[string]payload.EvalResult{
		"profile.0": {Profile: &payload.ProfileResult{Profiler: "Nsight-Compute"}},
		"profile.1": {Profile: &payload.ProfileResult{Profiler: "Nsight-Compute"}},
		"profile.2": {Profile: &payload.ProfileResult{Profiler: "Nsight-Compute", DownloadURL: &set}},
		"test":      {},
	}}
	as := []Artifact{
		{Path: "result.json", State: "finished", DownloadURL: "r"},
		{Path: "profile_data/profile.0.zip", State: "finished", DownloadURL: "https://api.example/a0/download"},
		{Path: "profile_data/profile.1.zip", State: "expired", DownloadURL: "https://api.example/a1/download"},
		{Path: "profile_data/profile.2.zip", State: "finished", DownloadURL: "https://api.example/a2/download"},
	}
	LinkProfiles(res, as)
	for key, want := range map[string]string{"profile.0": "https://api.example/a0/download", "profile.1": "", "profile.2": set} {
		got := ""
		if u := res.Runs[key].Profile.DownloadURL; u != nil {
			got = *u
		}
		if got != want {
			t.Errorf("%s download_url = %q, want %q", key, got, want)
		}
	}
	if res.Runs["test"].Profile != nil {
		t.Error("a run without a profile got one")
	}
}
