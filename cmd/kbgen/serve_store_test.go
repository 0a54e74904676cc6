package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	fleetstore "github.com/gpu-mode/kbgen/fleet/store"
)

// TestServeStoreRefusals: the store's refusals are usage errors (exit 2)
// that say what to do, before anything listens.
func TestServeStoreRefusals(t *testing.T) {
	other := filepath.Join(t.TempDir(), "other.db")
	st, err := fleetstore.Open(context.Background(), fleetstore.Options{Path: other, Service: "kbgen-staging"})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	bad := filepath.Join(t.TempDir(), "vendors.json")
	if err := os.WriteFile(bad, []byte(`[{"vendor": "amd", "token": "short", "queues": ["amd-mi300"]}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"BUILDKITE_API_TOKEN": "t", "BUILDKITE_ORG": "o", "BUILDKITE_PIPELINE": "p", "KBGEN_SERVER_TOKEN": "tok"}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"another service's database", []string{"--store", other}, `belongs to another service "kbgen-staging", not "kbgen"`},
		{"two stores", []string{"--store", other, "--database-url", "postgres://x@127.0.0.1:1/x"}, "--store and --database-url"},
		{"bad vendor tokens", []string{"--store", "off", "--vendor-tokens", bad}, "shorter than 16 bytes"},
		{"bad alerts", []string{"--store", "off", "--alerts", bad}, "--alerts"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runKbgen(t, env, "", append([]string{"serve", "--listen", "127.0.0.1:0"}, tc.args...)...)
			if r.code != 2 || !strings.Contains(r.stderr, tc.want) {
				t.Fatalf("exit %d, want 2 and %q: %s", r.code, tc.want, r.stderr)
			}
		})
	}
}
