package main

import (
	"runtime/debug"
	"strings"
	"testing"
)

func releaseInfo(cgo, trimpath string) *debug.BuildInfo {
	return &debug.BuildInfo{
		GoVersion: "go1.26.8",
		Path:      "github.com/gpu-mode/kbgen/cmd/kbgen",
		Main:      debug.Module{Path: "github.com/gpu-mode/kbgen"},
		Deps: []*debug.Module{
			{Path: "github.com/alecthomas/kong", Version: "v1.12.1", Sum: "h1:abc="},
			{Path: "example.com/old", Version: "v1.0.0", Replace: &debug.Module{Path: "example.com/fork", Version: "v1.0.1", Sum: "h1:def="}},
		},
		Settings: []debug.BuildSetting{
			{Key: "CGO_ENABLED", Value: cgo}, {Key: "-trimpath", Value: trimpath}, {Key: "GOOS", Value: "linux"}, {Key: "GOARCH", Value: "arm64"},
		},
	}
}

func TestFromBuildInfo(t *testing.T) {
	t.Parallel()
	sha := strings.Repeat("ab", 32)
	helper := func(cgo string) *debug.BuildInfo {
		bi := releaseInfo(cgo, "true")
		bi.Path = helperPackage
		return bi
	}
	for _, tc := range []struct {
		name    string
		bi      *debug.BuildInfo
		wantErr string
		want    string // the main component's name
	}{
		{name: "release build", bi: releaseInfo("0", "true"), want: "kbgen"},
		{name: "the NVML helper links libc", bi: helper("1"), want: "kbgen-nvml"},
		{name: "an NVML helper without cgo refused", bi: helper("0"), wantErr: "cannot load NVML"},
		{name: "cgo build refused", bi: releaseInfo("1", "true"), wantErr: "built with cgo"},
		{name: "untrimmed build refused", bi: releaseInfo("0", ""), wantErr: "without -trimpath"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			bom, err := FromBuildInfo(tc.bi, sha, Stamp{Version: "v0.1.0", Commit: "0123abc", Date: "2026-11-24T12:00:00Z"})
			if tc.wantErr != "" {
				// The message is the contract: the release script prints it as what to fix in the build.
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			m := bom.Metadata.Component
			if m.Name != tc.want {
				t.Errorf("main component named %q, want %q", m.Name, tc.want)
			}
			if m.Version != "v0.1.0" || m.PURL != "pkg:golang/github.com/gpu-mode/kbgen@v0.1.0" || m.Hashes[0].Content != sha {
				t.Errorf("main component %+v", m)
			}
			if bom.Metadata.Timestamp != "2026-11-24T12:00:00Z" {
				t.Errorf("timestamp %q, want the stamped commit date", bom.Metadata.Timestamp)
			}
			var purls []string
			for _, c := range bom.Components {
				purls = append(purls, c.PURL)
			}
			want := "pkg:golang/stdlib@go1.26.8 pkg:golang/github.com/alecthomas/kong@v1.12.1 pkg:golang/example.com/fork@v1.0.1"
			if got := strings.Join(purls, " "); got != want {
				t.Errorf("components %s, want %s (a replaced module is listed as what was linked)", got, want)
			}
			if len(bom.Dependencies) != 1 || len(bom.Dependencies[0].DependsOn) != 3 {
				t.Errorf("dependencies %+v", bom.Dependencies)
			}
			if bom.SerialNumber != "urn:uuid:abababab-abab-abab-abab-abababababab" {
				t.Errorf("serial %q", bom.SerialNumber)
			}
		})
	}
}
