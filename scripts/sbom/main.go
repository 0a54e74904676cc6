// Command sbom writes the CycloneDX 1.5 SBOM of a kbgen release binary,
// read from the binary itself (its embedded Go build info: the main module,
// every module linked in, the Go toolchain, the build settings), so the
// SBOM lists what shipped, not what go.mod allows. It refuses a kbgen that
// is not static (CGO_ENABLED=0, no ELF interpreter), and any binary not
// built with -trimpath: scripts/release.sh calls it on each binary, so a
// release can never carry a kbgen the sandbox would refuse. kbgen-nvml,
// the NVML helper, is the one binary that links libc (cgo), by design.
//
//	go run ./scripts/sbom -version v0.1.0 -commit SHA -date 2026-11-24T12:00:00Z \
//	  dist/kbgen-v0.1.0-linux-amd64 > dist/kbgen-v0.1.0-linux-amd64.cdx.json
//
// The version, commit and date are given, not read: Go leaves -ldflags out
// of a -trimpath binary's build info. Output is deterministic: the
// timestamp is the given (commit) date, the serial number is derived from
// the binary's SHA-256.
package main

import (
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"

	"github.com/gpu-mode/kbgen/sandbox"
)

func main() {
	var st Stamp
	flag.StringVar(&st.Version, "version", "", "the release version stamped into the binary")
	flag.StringVar(&st.Commit, "commit", "", "the commit it was built from")
	flag.StringVar(&st.Date, "date", "", "the commit's date, RFC 3339")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: go run ./scripts/sbom -version V -commit SHA -date DATE BINARY > BINARY.cdx.json")
	}
	flag.Parse()
	if flag.NArg() != 1 || st.Version == "" {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(flag.Arg(0), st, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "sbom: %v\n", err)
		os.Exit(1)
	}
}

// Stamp is what scripts/release.sh stamped into the binary with -X.
type Stamp struct{ Version, Commit, Date string }

// helperPackage is kbgen-nvml's main package: the binary that must link
// libc, where kbgen must not.
const helperPackage = "github.com/gpu-mode/kbgen/cmd/kbgen-nvml"

// e2ePackage is kbgen-e2e's main package: static like kbgen, so
// `kbgen doctor --e2e` runs on a node without Go.
const e2ePackage = "github.com/gpu-mode/kbgen/cmd/kbgen-e2e"

func run(path string, st Stamp, w io.Writer) error {
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%s: no Go build info: %w", path, err)
	}
	if bi.Path != helperPackage {
		if err := sandbox.CheckStatic(path); err != nil {
			return err
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(data)
	bom, err := FromBuildInfo(bi, hex.EncodeToString(sum[:]), st)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(bom)
}

// BOM is the part of CycloneDX 1.5 (https://cyclonedx.org/docs/1.5/json/)
// this SBOM fills.
type BOM struct {
	Format       string       `json:"bomFormat"`
	SpecVersion  string       `json:"specVersion"`
	SerialNumber string       `json:"serialNumber"`
	Version      int          `json:"version"`
	Metadata     Metadata     `json:"metadata"`
	Components   []Component  `json:"components"`
	Dependencies []Dependency `json:"dependencies"`
}

type Metadata struct {
	Timestamp string    `json:"timestamp,omitempty"`
	Tools     Tools     `json:"tools"`
	Component Component `json:"component"`
}

type Tools struct {
	Components []Component `json:"components"`
}

type Component struct {
	Type       string     `json:"type"`
	Ref        string     `json:"bom-ref,omitempty"`
	Name       string     `json:"name"`
	Version    string     `json:"version,omitempty"`
	PURL       string     `json:"purl,omitempty"`
	Hashes     []Hash     `json:"hashes,omitempty"`
	Properties []Property `json:"properties,omitempty"`
}

type Hash struct {
	Alg     string `json:"alg"`
	Content string `json:"content"`
}

type Property struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

type Dependency struct {
	Ref       string   `json:"ref"`
	DependsOn []string `json:"dependsOn"`
}

// FromBuildInfo is the SBOM of a binary with build info bi, SHA-256 sha
// and stamp st; an error when the build settings are not a release's.
func FromBuildInfo(bi *debug.BuildInfo, sha string, st Stamp) (*BOM, error) {
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	name := "kbgen"
	switch {
	case bi.Path == helperPackage:
		name = "kbgen-nvml"
		if settings["CGO_ENABLED"] != "1" {
			return nil, errors.New("kbgen-nvml built without cgo: it cannot load NVML")
		}
	case bi.Path == e2ePackage && settings["CGO_ENABLED"] == "0":
		name = "kbgen-e2e"
	case settings["CGO_ENABLED"] != "0":
		return nil, errors.New("built with cgo (CGO_ENABLED is not 0): the sandbox mounts kbgen into images of any libc, so it must be static")
	}
	if settings["-trimpath"] != "true" {
		return nil, errors.New("built without -trimpath: the binary would carry the builder's paths")
	}
	version := st.Version
	main := Component{
		Type: "application", Name: name, Version: version,
		PURL:   purl(bi.Main.Path, version),
		Hashes: []Hash{{Alg: "SHA-256", Content: sha}},
	}
	main.Ref = main.PURL
	for _, k := range []string{"GOOS", "GOARCH", "CGO_ENABLED", "-trimpath"} {
		main.Properties = append(main.Properties, Property{Name: "go:build:" + k, Value: settings[k]})
	}
	main.Properties = append(main.Properties, Property{Name: "kbgen:commit", Value: st.Commit})
	stdlib := Component{Type: "library", Name: "stdlib", Version: bi.GoVersion, PURL: purl("stdlib", bi.GoVersion)}
	stdlib.Ref = stdlib.PURL
	components := []Component{stdlib}
	for _, m := range bi.Deps {
		if m.Replace != nil {
			m = m.Replace
		}
		c := Component{Type: "library", Name: m.Path, Version: m.Version, PURL: purl(m.Path, m.Version)}
		c.Ref = c.PURL
		if m.Sum != "" {
			c.Properties = []Property{{Name: "go:sum", Value: m.Sum}}
		}
		components = append(components, c)
	}
	refs := make([]string, len(components))
	for i, c := range components {
		refs[i] = c.Ref
	}
	serial := sha[:32]
	return &BOM{
		Format: "CycloneDX", SpecVersion: "1.5", Version: 1,
		SerialNumber: fmt.Sprintf("urn:uuid:%s-%s-%s-%s-%s", serial[0:8], serial[8:12], serial[12:16], serial[16:20], serial[20:32]),
		Metadata: Metadata{
			Timestamp: st.Date,
			Tools:     Tools{Components: []Component{{Type: "application", Name: "kbgen scripts/sbom"}}},
			Component: main,
		},
		Components:   components,
		Dependencies: []Dependency{{Ref: main.Ref, DependsOn: refs}},
	}, nil
}

// purl is the package URL of a Go module (github.com/package-url/purl-spec,
// type golang).
func purl(path, version string) string {
	if version == "" {
		return "pkg:golang/" + path
	}
	return "pkg:golang/" + path + "@" + version
}
