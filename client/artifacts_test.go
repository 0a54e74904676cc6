package client

import "testing"

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
