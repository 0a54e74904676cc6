package main

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/payload"
)

func isPayloadError(err error) bool { return errors.As(err, new(*payload.Error)) }
func isNotExist(err error) bool     { return errors.Is(err, fs.ErrNotExist) }

func TestCanaryFlags(t *testing.T) {
	t.Parallel()
	bad := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(bad, []byte(`{"lang": "cobol"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		f     canaryFlags
		every time.Duration
		err   string
		is    func(error) bool // the kind, where there is one beside the usage error
	}{
		{name: "off by default", f: canaryFlags{CanaryFloor: 2, CanaryOffsetFloor: 5}},
		{name: "every 6 hours", f: canaryFlags{CanaryEvery: 6 * time.Hour, CanaryFloor: 2, CanaryOffsetFloor: 5}, every: 6 * time.Hour},
		{name: "too often", f: canaryFlags{CanaryEvery: 5 * time.Minute, CanaryFloor: 2, CanaryOffsetFloor: 5}, err: "--canary-every 5m0s: at least 10m0s"},
		{name: "no floor", f: canaryFlags{CanaryEvery: time.Hour, CanaryOffsetFloor: 5}, err: "--canary-floor 0"},
		{name: "no offset floor", f: canaryFlags{CanaryEvery: time.Hour, CanaryFloor: 2}, err: "--canary-offset-floor 0"},
		{name: "an offset floor of 100 %", f: canaryFlags{CanaryEvery: time.Hour, CanaryFloor: 2, CanaryOffsetFloor: 100}, err: "--canary-offset-floor 100"},
		{name: "a bad payload", f: canaryFlags{CanaryEvery: time.Hour, CanaryFloor: 2, CanaryOffsetFloor: 5, CanaryPayload: bad}, err: "--canary-payload", is: isPayloadError},
		{name: "a missing payload", f: canaryFlags{CanaryEvery: time.Hour, CanaryFloor: 2, CanaryOffsetFloor: 5, CanaryPayload: bad + ".none"}, err: "--canary-payload", is: isNotExist},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := tc.f.config()
			if tc.err != "" {
				// The message is the contract: the operator reads which flag to fix.
				if err == nil || !strings.Contains(err.Error(), tc.err) || exitcode.Of(err) != exitcode.Usage {
					t.Fatalf("error %v (exit %d), want a usage error containing %q", err, exitcode.Of(err), tc.err)
				}
				if tc.is != nil && !tc.is(err) {
					t.Errorf("error %v (%T), not the kind of failure %s is", err, err, tc.name)
				}
				return
			}
			if err != nil || cfg.Every != tc.every {
				t.Fatalf("config = %+v, %v", cfg, err)
			}
			if tc.every == 0 {
				return
			}
			job, err := payload.Decode(cfg.Payload)
			if err != nil || job.Mode != payload.ModeBenchmark || cfg.Options.Floor != 0.02 || cfg.Options.OffsetFloor != 0.05 {
				t.Errorf("canary job mode %v (%v), floor %v, offset floor %v; want benchmark, 0.02, 0.05", job.Mode, err, cfg.Options.Floor, cfg.Options.OffsetFloor)
			}
		})
	}
}
