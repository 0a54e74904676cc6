package imageref

import (
	"errors"
	"strings"
	"testing"
)

const sha = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in string
		want     Reference
	}{
		{"bare name", "ubuntu", Reference{Name: "ubuntu"}},
		{"tag", "ubuntu:24.04", Reference{Name: "ubuntu", Tag: "24.04"}},
		{"registry and path", "ghcr.io/gpu-mode/kbgen-runner-cuda:12.8.1", Reference{Name: "ghcr.io/gpu-mode/kbgen-runner-cuda", Tag: "12.8.1"}},
		{"digest", "ghcr.io/gpu-mode/kbgen-cuda@" + sha, Reference{Name: "ghcr.io/gpu-mode/kbgen-cuda", Digest: sha}},
		{"tag and digest", "img:1@" + sha, Reference{Name: "img", Tag: "1", Digest: sha}},
		{"registry port", "localhost:5000/img", Reference{Name: "localhost:5000/img"}},
		{"registry port and tag", "127.0.0.1:5000/a/b:t", Reference{Name: "127.0.0.1:5000/a/b", Tag: "t"}},
		{"upper-case registry", "Example.com/img", Reference{Name: "Example.com/img"}},
		{"upper-case tag", "img:12.8.1-Devel_x", Reference{Name: "img", Tag: "12.8.1-Devel_x"}},
		{"separators", "a.b_c__d---e/f", Reference{Name: "a.b_c__d---e/f"}},
		{"sha512", "img@sha512:" + strings.Repeat("ab", 64), Reference{Name: "img", Digest: "sha512:" + strings.Repeat("ab", 64)}},
		{"longest name", strings.Repeat("a", MaxNameLength), Reference{Name: strings.Repeat("a", MaxNameLength)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Parse(tt.in)
			if err != nil || got != tt.want {
				t.Fatalf("Parse(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
			}
			if got.String() != tt.in {
				t.Errorf("String() = %q, want %q", got.String(), tt.in)
			}
		})
	}
}

func TestParseRefuses(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, in, why string }{
		{"empty", "", "name"},
		{"a flag", "--privileged", "lower-case"},
		{"upper-case repository", "gpu-mode/Kbgen", "lower-case"},
		{"upper-case bare name", "Ubuntu", "lower-case"},
		{"shell", "img$(id)", "lower-case"},
		{"interpolation", "img:$TAG", "tag"},
		{"space", "img 1", "lower-case"},
		{"newline", "img\n", "lower-case"},
		{"trailing separator", "img-", "lower-case"},
		{"triple underscore", "a___b", "lower-case"},
		{"empty path component", "a//b", "lower-case"},
		{"empty tag", "img:", "tag"},
		{"tag starts with a dot", "img:.x", "tag"},
		{"tag too long", "img:" + strings.Repeat("t", 129), "tag"},
		{"two tags", "a:b:c", "lower-case"},
		{"unknown digest algorithm", "img@md5:" + strings.Repeat("a", 32), "digest"},
		{"short digest", "img@sha256:abc", "digest"},
		{"upper-case digest", "img@" + strings.ToUpper(sha), "digest"},
		{"two digests", "img@" + sha + "@" + sha, "digest"},
		{"ipv6 registry", "[::1]:5000/img", "lower-case"},
		{"empty port", "host:/img", "lower-case"},
		{"name too long", strings.Repeat("a", MaxNameLength+1), "name"},
		{"non-ASCII registry", "exämple.com/img", "lower-case"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Parse(tt.in)
			if err == nil {
				t.Fatalf("Parse(%q) = %+v, want an error", tt.in, got)
			}
			// Why is the user's explanation: it names the part at fault.
			var re *Error
			if !errors.As(err, &re) || re.Ref != tt.in || !strings.Contains(re.Why, tt.why) {
				t.Errorf("Parse(%q): %v, want it to say why (%q)", tt.in, err, tt.why)
			}
		})
	}
}

// FuzzParse: what parses writes back unchanged, and holds nothing a
// plugin config, argv or Buildkite's interpolation would act on.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"ubuntu", "ghcr.io/a/b:1@" + sha, "localhost:5000/x", "a:b:c", "--x", "a$b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := Parse(s)
		if err != nil {
			return
		}
		if r.String() != s {
			t.Fatalf("Parse(%q).String() = %q", s, r.String())
		}
		if s[0] == '-' || strings.ContainsAny(s, "$'\"` \t\n\\{}[]#&*!|>%,") {
			t.Fatalf("Parse(%q) accepted a special character", s)
		}
	})
}
