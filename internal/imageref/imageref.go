// Package imageref is the one container image reference kbgen accepts:
// a vendor's image in the registry, a job's KERNELBOT_IMAGE override, and
// the image the sandbox hands `docker run` all pass the same Parse, so a
// reference the generator emits is one the sandbox runs.
//
// The grammar is the distribution reference's (github.com/distribution/
// reference, which docker parses images with):
//
//	reference := name [":" tag] ["@" digest]
//	name      := [domain "/"] path-component ["/" path-component]*
//	domain    := domain-component ["." domain-component]* [":" port]
//	path-component := [a-z0-9]+ (("." | "_" | "__" | "-"+) [a-z0-9]+)*
//	tag       := [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}
//
// with the name at most 255 characters. Two deliberate narrowings: no
// IPv6 literal registry ("[::1]:5000/x"; brackets have no business in a
// plugin config), and a digest only of an algorithm docker can verify
// (sha256, sha384, sha512, lower-case hex of its length), which is what
// the reference package's digest check accepts. Everything that parses
// starts with a letter or digit (never a flag) and holds no '$', quote,
// space or newline, so it is inert in YAML, argv and Buildkite's
// interpolation.
package imageref

import (
	"fmt"
	"strings"
)

// MaxNameLength is distribution's NameTotalLengthMax.
const MaxNameLength = 255

// maxTagLength is the tag grammar's {0,127} plus its first character.
const maxTagLength = 128

// digestHexLength is each accepted digest algorithm's hex length.
var digestHexLength = map[string]int{"sha256": 64, "sha384": 96, "sha512": 128}

// Reference is a parsed image reference.
type Reference struct {
	Name   string // [domain/]path, e.g. ghcr.io/gpu-mode/kbgen-runner-cuda
	Tag    string // "" when absent
	Digest string // "sha256:…", "" when absent
}

// Parse reads an image reference in the grammar above.
func Parse(s string) (Reference, error) {
	rest, digest, hasDigest := strings.Cut(s, "@")
	if hasDigest && !validDigest(digest) {
		return Reference{}, refError(s, "the digest must be sha256:, sha384: or sha512: and that many lower-case hex digits")
	}
	name, tag := rest, ""
	if i := strings.LastIndexByte(rest, ':'); i > strings.LastIndexByte(rest, '/') {
		name, tag = rest[:i], rest[i+1:]
		if !validTag(tag) {
			return Reference{}, refError(s, "a tag is 1 to 128 letters, digits, '_', '.' or '-', not starting with '.' or '-'")
		}
	}
	if err := checkName(name); err != nil {
		return Reference{}, refError(s, err.Error())
	}
	return Reference{Name: name, Tag: tag, Digest: digest}, nil
}

func refError(s, why string) error { return &Error{Ref: s, Why: why} }

// Error is a string that is not an image reference, and why.
type Error struct{ Ref, Why string }

func (e *Error) Error() string {
	return fmt.Sprintf("%q is not an image reference: %s", e.Ref, e.Why)
}

// String writes the reference back as Parse read it.
func (r Reference) String() string {
	s := r.Name
	if r.Tag != "" {
		s += ":" + r.Tag
	}
	if r.Digest != "" {
		s += "@" + r.Digest
	}
	return s
}

// checkName: an optional registry host before the first '/', then the
// repository's path components.
func checkName(name string) error {
	if name == "" || len(name) > MaxNameLength {
		return fmt.Errorf("the name must be 1 to %d characters", MaxNameLength)
	}
	parts := strings.Split(name, "/")
	if len(parts) > 1 && validDomain(parts[0]) {
		parts = parts[1:]
	}
	for _, p := range parts {
		if !validPathComponent(p) {
			return fmt.Errorf("%q must be lower-case letters and digits joined by '.', '_', '__' or '-' (a registry host may come first)", p)
		}
	}
	return nil
}
