package pipelinegen

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/payload"
	"github.com/gpu-mode/kbgen/registry"
	"github.com/gpu-mode/kbgen/signing"
)

// TestBootstrap: kbgen generate's sequence, printing (no upload): the
// key first, then the job, the signature and the document.
func TestBootstrap(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	kp, err := signing.Generate(signing.DefaultAlgorithm, "k1")
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(dir, "private.jwks")
	if err := os.WriteFile(keyFile, kp.Private, 0o600); err != nil {
		t.Fatal(err)
	}
	in, err := ExampleJobFor(&registry.Vendor{Queue: "nvidia-h100", Runtime: contract.RuntimeNVIDIA}, payload.ModeTest)
	if err != nil {
		t.Fatal(err)
	}
	jobEnv := contract.MapLookup(map[string]string{contract.EnvPayload: in.Encoded, contract.EnvQueue: "nvidia-h100"})
	noEnv := contract.MapLookup(nil)
	for _, tc := range []struct {
		name             string
		signing          Signing
		lookup           contract.Lookup
		wantCode         int
		wantOut, wantLog string
	}{
		{"a job, unsigned", Signing{}, jobEnv, exitcode.OK, "kbgen run", ""},
		{"a job, signed", Signing{KeyFile: keyFile, RepoURL: "https://example.com/r.git"}, jobEnv, exitcode.OK, contract.EnvStepSignature, `signed 1 step(s) with key "k1" for https://example.com/r.git`},
		{"no job", Signing{}, noEnv, exitcode.OK, "steps", "no Kernelbot job in this build"},
		{"a key without the repository", Signing{KeyFile: keyFile}, jobEnv, exitcode.Usage, "", ""},
		{"a key that is not there, even without a job", Signing{KeyFile: filepath.Join(dir, "none"), RepoURL: "r"}, noEnv, exitcode.Usage, "", ""},
		{"no queue", Signing{}, contract.MapLookup(map[string]string{contract.EnvPayload: in.Encoded}), exitcode.Usage, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var out, log bytes.Buffer
			err := Bootstrap(context.Background(), BootstrapOptions{Signing: tc.signing, Build: Build{Lookup: tc.lookup}, Stdout: &out, Log: &log})
			if got := exitcode.Of(err); got != tc.wantCode {
				t.Fatalf("exit %d (%v), want %d", got, err, tc.wantCode)
			}
			if tc.wantCode != exitcode.OK {
				if out.Len() > 0 || log.Len() > 0 {
					t.Errorf("a failed bootstrap said %q, %q", out.String(), log.String())
				}
				return
			}
			if !strings.Contains(out.String(), tc.wantOut) || !strings.Contains(log.String(), tc.wantLog) || (tc.wantLog == "" && log.Len() > 0) {
				t.Errorf("out %q, log %q: want %q, %q", out.String(), log.String(), tc.wantOut, tc.wantLog)
			}
		})
	}
}
