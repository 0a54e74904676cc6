// Command provenance writes the in-toto statement (SLSA provenance v1)
// of a release: which files it made (each by SHA-256), from which commit
// of which repository, by which builder and inputs. scripts/release.sh
// runs it after the binaries and before SHA256SUMS, so the signed
// SHA256SUMS covers the statement too.
//
//	go run ./scripts/provenance -version v1.2.3 -commit SHA -date DATE dist/kbgen-* > dist/kbgen-v1.2.3.intoto.jsonl
//
// Formats: https://github.com/in-toto/attestation/blob/main/spec/v1/statement.md
// and https://slsa.dev/spec/v1.0/provenance (buildDefinition, runDetails).
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
)

// Statement is an in-toto v1 statement.
type Statement struct {
	Type          string     `json:"_type"`
	Subject       []Subject  `json:"subject"`
	PredicateType string     `json:"predicateType"`
	Predicate     Provenance `json:"predicate"`
}

// Subject is one released file.
type Subject struct {
	Name   string            `json:"name"`
	Digest map[string]string `json:"digest"`
}

// Provenance is SLSA provenance v1's predicate.
type Provenance struct {
	BuildDefinition BuildDefinition `json:"buildDefinition"`
	RunDetails      RunDetails      `json:"runDetails"`
}

type BuildDefinition struct {
	BuildType            string               `json:"buildType"`
	ExternalParameters   map[string]string    `json:"externalParameters"`
	InternalParameters   map[string]string    `json:"internalParameters"`
	ResolvedDependencies []ResourceDescriptor `json:"resolvedDependencies"`
}

type ResourceDescriptor struct {
	URI    string            `json:"uri"`
	Digest map[string]string `json:"digest,omitempty"`
}

type RunDetails struct {
	Builder  Builder  `json:"builder"`
	Metadata Metadata `json:"metadata"`
}

type Builder struct {
	ID string `json:"id"`
}

type Metadata struct {
	InvocationID string `json:"invocationId,omitempty"`
}

// BuildType names how scripts/release.sh builds: its inputs are the
// version, the commit and the architectures.
const BuildType = "https://github.com/gpu-mode/kbgen/blob/main/scripts/release.sh"

type options struct {
	version, commit, date, repo, arches, builder, invocation string
}

func main() {
	var o options
	flag.StringVar(&o.version, "version", "", "release version (v1.2.3)")
	flag.StringVar(&o.commit, "commit", "", "git commit the release is built from")
	flag.StringVar(&o.date, "date", "", "the commit's date (stamped into the binaries)")
	flag.StringVar(&o.repo, "repo", "https://github.com/gpu-mode/kbgen", "the repository")
	flag.StringVar(&o.arches, "arches", "", "the architectures built")
	flag.StringVar(&o.builder, "builder", "local", "who built it: the Buildkite agent's queue and name, or local")
	flag.StringVar(&o.invocation, "invocation", "", "the build's URL (BUILDKITE_BUILD_URL)")
	flag.Parse()
	if o.version == "" || o.commit == "" || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: provenance -version V -commit SHA [-date D -arches A -builder B -invocation URL] FILE...")
		os.Exit(2)
	}
	st, err := build(o, flag.Args())
	if err == nil {
		err = json.NewEncoder(os.Stdout).Encode(st)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "provenance:", err)
		os.Exit(1)
	}
}

// build hashes files and makes the statement.
func build(o options, files []string) (*Statement, error) {
	st := &Statement{
		Type:          "https://in-toto.io/Statement/v1",
		PredicateType: "https://slsa.dev/provenance/v1",
		Predicate: Provenance{
			BuildDefinition: BuildDefinition{
				BuildType:          BuildType,
				ExternalParameters: map[string]string{"version": o.version, "repository": o.repo, "commit": o.commit},
				InternalParameters: map[string]string{"arches": o.arches, "commitDate": o.date, "go": runtime.Version()},
				ResolvedDependencies: []ResourceDescriptor{
					{URI: "git+" + o.repo + "@" + o.commit, Digest: map[string]string{"gitCommit": o.commit}},
					{URI: "https://go.dev/dl/" + runtime.Version()},
				},
			},
			RunDetails: RunDetails{Builder: Builder{ID: o.builder}, Metadata: Metadata{InvocationID: o.invocation}},
		},
	}
	for _, f := range files {
		sum, err := sha256File(f)
		if err != nil {
			return nil, err
		}
		st.Subject = append(st.Subject, Subject{Name: filepath.Base(f), Digest: map[string]string{"sha256": sum}})
	}
	return st, nil
}

func sha256File(name string) (string, error) {
	f, err := os.Open(name)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
