package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gpu-mode/kbgen/fleet/verify"
	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/serve"
)

// TestVerifyCmd: kbgen verify's exit code is the verdict's (0 confirmed,
// 6 otherwise), 2 for a run the service will not verify or bad flags;
// the report is JSON on stdout. The service's side is serve's TestVerify.
func TestVerifyCmd(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" {
			w.WriteHeader(http.StatusUnauthorized)
			_ = json.NewEncoder(w).Encode(serve.ErrorBody{Error: "missing or wrong bearer token"})
			return
		}
		switch r.URL.Path {
		case "/v1/runs/good/verify":
			_ = json.NewEncoder(w).Encode(verify.Report{RunID: "good", Verdict: verify.Confirmed, Spread: 0.01, Bound: 0.06})
		case "/v1/runs/bad/verify":
			_ = json.NewEncoder(w).Encode(verify.Report{RunID: "bad", Verdict: verify.Disputed, Spread: 0.1, Bound: 0.06, Why: "beyond"})
		default:
			w.WriteHeader(http.StatusConflict)
			_ = json.NewEncoder(w).Encode(serve.ErrorBody{Error: "cannot verify: no run"})
		}
	}))
	t.Cleanup(srv.Close)
	env := map[string]string{"KBGEN_SERVER": srv.URL, "KBGEN_SERVER_TOKEN": "tok"}
	for _, tc := range []struct {
		name   string
		env    map[string]string
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{name: "confirmed", env: env, args: []string{"verify", "good"}, code: exitcode.OK, stdout: `"verdict": "confirmed"`},
		{name: "disputed", env: env, args: []string{"verify", "bad"}, code: exitcode.Unconfirmed, stdout: `"verdict": "disputed"`, stderr: "not confirmed"},
		{name: "refused", env: env, args: []string{"verify", "nope"}, code: exitcode.Usage, stderr: "cannot verify: no run"},
		{name: "wrong token", env: map[string]string{"KBGEN_SERVER": srv.URL, "KBGEN_SERVER_TOKEN": "x"}, args: []string{"verify", "good"}, code: exitcode.Usage, stderr: "bearer token"},
		{name: "no server", env: map[string]string{}, args: []string{"verify", "good"}, code: exitcode.Usage, stderr: "no server"},
		{name: "too many", env: env, args: []string{"verify", "good", "--count", "9"}, code: exitcode.Usage, stderr: "--count 9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res := runKbgen(t, tc.env, "", tc.args...)
			if res.code != tc.code || !strings.Contains(res.stdout, tc.stdout) || !strings.Contains(res.stderr, tc.stderr) {
				t.Errorf("exit %d, want %d\nstdout: %s\nstderr: %s", res.code, tc.code, res.stdout, res.stderr)
			}
		})
	}
}
