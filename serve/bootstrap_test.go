package serve

import (
	"net/http"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/internal/contract"
)

// TestBootstrapQueueDefault: a run that names no bootstrap queue (Kernelbot's
// launcher) gets the service's, so its pipeline is generated and signed by
// the control agents; a run that names one keeps it.
func TestBootstrapQueueDefault(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, service, request, want string
	}{
		{"the service's default", "kernelbot-control", "", "kernelbot-control"},
		{"the request's own", "kernelbot-control", "other-control", "other-control"},
		{"none at all", "", "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, rigOpts{bootstrap: tc.service})
			resp, body := r.do("POST", "/v1/runs", RunRequest{RunID: "b", Queue: "h100", Payload: testPayload(t), BootstrapQueue: tc.request}, testToken)
			if resp.StatusCode != http.StatusCreated {
				t.Fatalf("POST: %d %s", resp.StatusCode, body)
			}
			st := r.await("b", 10*time.Second)
			env, _, _ := r.fake.CreatedEnv(st.Build)
			if got := env[contract.EnvBootstrapQueue]; got != tc.want {
				t.Fatalf("build env %s=%q; want %q", contract.EnvBootstrapQueue, got, tc.want)
			}
		})
	}
}
