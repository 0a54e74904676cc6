package contract

import (
	"slices"
	"strings"
	"testing"
)

// TestGPUsTag: a multi-GPU agent's devices join into one tag value and
// split back; an id a tag list cannot carry (a comma would start another
// tag) leaves the tag out.
func TestGPUsTag(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		ids  []string
		want string
	}{
		{"one NVIDIA GPU", []string{"GPU-5a1c3333-4c1e-2f6a-9d0b-e3f1a2b40003"}, "GPU-5a1c3333-4c1e-2f6a-9d0b-e3f1a2b40003"},
		{"an AMD pair", []string{"/dev/dri/renderD128", "/dev/dri/renderD136"}, "/dev/dri/renderD128+/dev/dri/renderD136"},
		{"a comma", []string{"GPU-1,queue=x"}, ""},
		{"a quote", []string{`GPU-1"`}, ""},
		{"none", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := GPUsTagValue(tc.ids)
			if got != tc.want {
				t.Fatalf("GPUsTagValue(%q) = %q, want %q", tc.ids, got, tc.want)
			}
			if got != "" && !slices.Equal(GPUsFromTag(got), tc.ids) {
				t.Errorf("GPUsFromTag(%q) = %q, want %q", got, GPUsFromTag(got), tc.ids)
			}
		})
	}
}

// TestGPUsFromTagRefuses: a registration's tag that GPUsTagValue could not
// have written names no GPUs at all (not a cleaned part of it).
func TestGPUsFromTagRefuses(t *testing.T) {
	t.Parallel()
	for name, v := range map[string]string{
		"empty":          "",
		"an empty id":    "GPU-a++GPU-b",
		"markup":         "GPU-a+<script>",
		"a space":        "GPU-a+ GPU-b",
		"a newline":      "GPU-a\nkbgen_agent_info",
		"too long an id": strings.Repeat("a", 65),
		"too many ids":   strings.Repeat("g+", MaxTaggedGPUs) + "g",
	} {
		if got := GPUsFromTag(v); got != nil {
			t.Errorf("%s: GPUsFromTag(%q) = %q, want nil", name, v, got)
		}
	}
}
