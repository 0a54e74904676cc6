// Command sbom writes the CycloneDX 1.5 SBOM of a kbgen release binary,
// read from the binary itself (its embedded Go build info: the main module,
// every module linked in, the Go toolchain, the build settings), so the
// SBOM lists what shipped, not what go.mod allows. It refuses a binary that
// is not static (CGO_ENABLED=0, no ELF interpreter) or not built with
// -trimpath: scripts/release.sh calls it on each binary, so a release can
// never carry a kbgen the sandbox would refuse.
//
//	go run ./scripts/sbom dist/kbgen-v0.1.0-linux-amd64 > dist/kbgen-v0.1.0-linux-amd64.cdx.json
//
// Output is deterministic: the timestamp is the date stamped into the
// binary (-X …/internal/version.Date, the commit's date), the serial number
// is derived from the binary's SHA-256.
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
	"regexp"
	"runtime/debug"

	"github.com/gpu-mode/kbgen/sandbox"
)

func main() {
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: go run ./scripts/sbom BINARY > BINARY.cdx.json")
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(flag.Arg(0), os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "sbom: %v\n", err)
		os.Exit(1)
	}
}

func run(path string, w io.Writer) error {
	if err := sandbox.CheckStatic(path); err != nil {
		return err
	}
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%s: no Go build info: %w", path, err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(data)
	bom, err := FromBuildInfo(bi, hex.EncodeToString(sum[:]))
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

// stamped reads a -X value of internal/version from the recorded -ldflags.
func stamped(ldflags, name string) string {
	re := regexp.MustCompile(`-X[ =]github\.com/gpu-mode/kbgen/internal/version\.` + name + `=(\S+)`)
	if m := re.FindStringSubmatch(ldflags); m != nil {
		return m[1]
	}
	return ""
}

// FromBuildInfo is the SBOM of a binary with build info bi and SHA-256
// sha; an error when the build settings are not a release's.
func FromBuildInfo(bi *debug.BuildInfo, sha string) (*BOM, error) {
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	if settings["CGO_ENABLED"] != "0" {
		return nil, errors.New("built with cgo (CGO_ENABLED is not 0): the sandbox mounts kbgen into images of any libc, so it must be static")
	}
	if settings["-trimpath"] != "true" {
		return nil, errors.New("built without -trimpath: the binary would carry the builder's paths")
	}
	version := stamped(settings["-ldflags"], "Version")
	if version == "" {
		version = bi.Main.Version
	}
	main := Component{
		Type: "application", Name: "kbgen", Version: version,
		PURL:   purl(bi.Main.Path, version),
		Hashes: []Hash{{Alg: "SHA-256", Content: sha}},
	}
	main.Ref = main.PURL
	for _, k := range []string{"GOOS", "GOARCH", "CGO_ENABLED", "-trimpath", "-ldflags"} {
		main.Properties = append(main.Properties, Property{Name: "go:build:" + k, Value: settings[k]})
	}
	main.Properties = append(main.Properties, Property{Name: "kbgen:commit", Value: stamped(settings["-ldflags"], "Commit")})
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
			Timestamp: stamped(settings["-ldflags"], "Date"),
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
