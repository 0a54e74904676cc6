package main

import (
	"strings"
	"testing"
)

// TestServeViewTokenMustDiffer: a view token equal to the server token
// would let its read-only holders submit: exit 2 before listening.
func TestServeViewTokenMustDiffer(t *testing.T) {
	env := map[string]string{"BUILDKITE_API_TOKEN": "t", "BUILDKITE_ORG": "o", "BUILDKITE_PIPELINE": "p",
		"KBGEN_SERVER_TOKEN": "same", "KBGEN_VIEW_TOKEN": "same"}
	res := runKbgen(t, env, "", "serve", "--listen", "127.0.0.1:0")
	if res.code != 2 || !strings.Contains(res.stderr, "KBGEN_VIEW_TOKEN must differ") {
		t.Fatalf("exit %d, %s", res.code, res.stderr)
	}
}
