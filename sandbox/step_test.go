package sandbox

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/sandbox/refusal"
)

// TestReadStep: the door reads everything the rest of the sandbox takes:
// the step's ask, the placement, the job, the node's settings and the
// step's environment (the allow-list: no token, no payload), for each
// launcher; and refuses a bad environment there, in the order a step is
// judged (the plugin config before the placement, the placement before
// the node's lease setting).
func TestReadStep(t *testing.T) {
	env := jobEnv(t)
	env["BUILDKITE_AGENT_ACCESS_TOKEN"] = "agent-token"
	env[contract.EnvRunID] = "run-9"
	env[contract.EnvGPUReset] = "1"
	env[contract.EnvLeaseWait] = "2m"
	env[contract.EnvBuildkiteRetryCount] = "1"
	env[contract.EnvNoisePolicy] = "retry=true"
	env[contract.EnvNVMLHelper] = "off"
	env["PATH"] = "/opt/bin"
	s, err := ReadStep(lookup(env), Request{Command: []string{"kbgen", "run"}})
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case s.Config.Image != "img:1" || s.Config.CPUs != 2:
		t.Errorf("config = %+v", s.Config)
	case s.Placement.Memory.String() != "220g" || s.Placement.CPUs.String() != "36-47,148-159":
		t.Errorf("placement = %+v", s.Placement)
	case s.Job.jobID != "job-7" || !s.Job.hasPayload:
		t.Errorf("job = %+v", s.Job)
	case !s.GPUReset || s.Lease.Wait != 2*time.Minute || s.Lease.Dir != env[contract.EnvLeaseDir] || s.Retries != "1" || !s.Policy.Retry || !s.NVMLOff || s.Path != "/opt/bin":
		t.Errorf("settings = %+v", s)
	case s.StageBase != "/var/lib/buildkite-agent/builds/.kbgen-stage":
		t.Errorf("stage base = %q", s.StageBase)
	}
	if !slices.Contains(s.Env, contract.EnvRunID+"=run-9") || slices.ContainsFunc(s.Env, func(e string) bool {
		return strings.Contains(e, "agent-token") || strings.HasPrefix(e, contract.EnvPayload)
	}) {
		t.Errorf("env = %q: want the run id, not the token or the payload", s.Env)
	}

	p, err := ReadStep(lookup(env), Request{Launcher: LauncherProcess, Command: []string{"kbgen", "run"}, User: "2000:3000"})
	if err != nil {
		t.Fatal(err)
	}
	if p.UID != 2000 || p.GID != 3000 || strings.HasPrefix(p.StageBase, env[contract.EnvBuildPath]) || !slices.Contains(p.Env, "PATH=/opt/bin") {
		t.Errorf("process step = uid %d:%d, stage %q, env %q: want its user, a stage outside the build path and the image's PATH", p.UID, p.GID, p.StageBase, p.Env)
	}

	for _, tt := range []struct {
		name   string
		change map[string]string
		req    Request
		is     func(error) bool
		want   string
	}{
		{"no command", nil, Request{}, refusal.IsConfigError, "no command"},
		{"unknown launcher", nil, Request{Launcher: "vm", Command: []string{"true"}}, refusal.IsConfigError, `"vm" is not`},
		{"config before placement", map[string]string{"BUILDKITE_PLUGINS": `[{"gpu-docker":{"image":"img:1","bogus":1}}]`, contract.EnvCPUSet: ""}, Request{Command: []string{"kbgen", "run"}}, refusal.IsConfigError, "bogus"},
		{"placement before lease", map[string]string{contract.EnvCPUSet: "", contract.EnvLeaseWait: "soon"}, Request{Command: []string{"kbgen", "run"}}, refusal.IsRefused, contract.EnvCPUSet},
		{"the lease setting", map[string]string{contract.EnvLeaseWait: "soon"}, Request{Command: []string{"kbgen", "run"}}, refusal.IsRefused, contract.EnvLeaseWait},
		{"root's uid", nil, Request{Launcher: LauncherProcess, Command: []string{"kbgen", "run"}, User: "0"}, refusal.IsConfigError, "root"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			env := jobEnv(t)
			for k, v := range tt.change {
				env[k] = v
			}
			_, err := ReadStep(lookup(env), tt.req)
			// The message is the contract: it names the setting the pipeline or node must fix.
			if err == nil || !tt.is(err) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one saying %q", err, tt.want)
			}
		})
	}
}
