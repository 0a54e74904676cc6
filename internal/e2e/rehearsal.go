package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/gpu-mode/kbgen"
	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/fakebuildkite"
)

// RehearsalOptions say how to start an operator's rehearsal: the local
// Buildkite the end-to-end tests use, on named addresses, with agents
// started from staged installs.
type RehearsalOptions struct {
	// Listen and AgentListen are the REST and Agent API addresses; ""
	// takes a free loopback port.
	Listen, AgentListen string
	// Roots are `kbgen node install --root` (or `--control --root`)
	// trees: each one's agents are started with their rendered config and
	// hooks.
	Roots []string
	// AgentBinary is buildkite-agent; Kbgen the kbgen the agents run (its
	// directory leads their PATH).
	AgentBinary, Kbgen string
	// NoGPU runs the GPU agents' steps without GPU flags (a laptop).
	NoGPU bool
	// Webhook is where to POST signed webhooks (kbgen serve's
	// /v1/buildkite/webhook); "" sends none.
	Webhook string
	// Progress receives one line per agent started (may be nil).
	Progress func(format string, args ...any)
}

// Rehearsal is a running local Buildkite and its agents.
type Rehearsal struct {
	Server *fakebuildkite.Server
	// WebhookSecret signs the webhooks (kbgen serve's
	// BUILDKITE_WEBHOOK_SECRET); "" without a webhook.
	WebhookSecret string
	// ServerToken is the bearer token for kbgen serve on TCP and its
	// clients (KBGEN_SERVER_TOKEN).
	ServerToken string
	agents      []*Agent
	dir         string
}

// StartRehearsal starts the local Buildkite, whose builds start from the
// pipeline's settings steps (kbgen.PipelineSettings: the bootstrap on the
// control queue), as the real organisation's do, and the agents of
// opts.Roots. Close stops everything and removes what it made.
func StartRehearsal(opts RehearsalOptions) (_ *Rehearsal, err error) {
	progress := opts.Progress
	if progress == nil {
		progress = func(string, ...any) {}
	}
	r := &Rehearsal{}
	if r.ServerToken, err = randomHex(16); err != nil {
		return nil, err
	}
	if r.dir, err = os.MkdirTemp("", "kbgen-rehearsal-"); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = r.Close()
		}
	}()
	repo := filepath.Join(r.dir, "repo")
	if err := writeRehearsalRepo(repo); err != nil {
		return nil, err
	}
	r.Server, err = fakebuildkite.NewLive(fakebuildkite.Options{Pipeline: kbgen.PipelineSettings, Repo: repo,
		Listen: opts.Listen, AgentListen: opts.AgentListen, LostAfter: 30 * time.Second})
	if err != nil {
		return nil, err
	}
	// The REST pipeline shows the settings the organisation should have
	// (docs/buildkite-setup.md), so kbgen doctor --buildkite passes here.
	settings := fakebuildkite.NewPipelineSettings()
	settings.Configuration, settings.TriggerMode, settings.BuildPullRequests = string(kbgen.PipelineSettings), "none", false
	r.Server.SetPipelineSettings(settings)
	if opts.Webhook != "" {
		if r.WebhookSecret, err = randomHex(16); err != nil {
			return nil, err
		}
		r.Server.SetWebhook(fakebuildkite.Webhook{URL: opts.Webhook, Secret: r.WebhookSecret, Every: 200 * time.Millisecond})
	}
	for i, root := range opts.Roots {
		if err := r.startAgents(opts, i, root, progress); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// writeRehearsalRepo is the repository the agents check out: the
// gpu-docker plugin and the settings steps this kbgen carries.
func writeRehearsalRepo(dir string) error {
	plugin := filepath.Join(dir, ".buildkite", "plugins", "gpu-docker")
	if err := os.MkdirAll(plugin, 0o755); err != nil {
		return err
	}
	if err := os.CopyFS(plugin, kbgen.GPUDockerPlugin()); err != nil {
		return err
	}
	if err := os.Chmod(filepath.Join(plugin, "hooks", "command"), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, ".buildkite", "pipeline-settings.yml"), kbgen.PipelineSettings, 0o644); err != nil {
		return err
	}
	return commitAll(dir)
}

// startAgents starts the control agent or the GPU agents installed under
// root, the i-th root.
func (r *Rehearsal) startAgents(opts RehearsalOptions, i int, root string, progress func(string, ...any)) error {
	// The hooks get the root's paths: absolute, since jobs run elsewhere.
	root, err := filepath.Abs(root)
	if err != nil {
		return err
	}
	path := "PATH=" + filepath.Dir(opts.Kbgen) + string(os.PathListSeparator) + os.Getenv("PATH")
	if ca, err := ReadControl(root); err == nil {
		dir := filepath.Join(r.dir, fmt.Sprintf("root%d-control", i))
		cfg, err := ca.Prepare(root, dir)
		if err != nil {
			return err
		}
		return r.start(opts, AgentSpec{Name: fmt.Sprintf("rehearsal%d-control", i), Config: cfg, Dir: dir, Env: []string{path, "HOME=" + dir}}, root, progress)
	}
	agents, err := ReadNode(root)
	if err != nil {
		return fmt.Errorf("%s holds neither a control agent nor GPU agents: %w", root, err)
	}
	for _, na := range agents {
		dir := filepath.Join(r.dir, fmt.Sprintf("root%d-%s", i, na.Plan.ID))
		cfg, err := na.Prepare(root, dir)
		if err != nil {
			return err
		}
		env := append(append([]string{}, na.Env...), path, "HOME="+dir)
		if opts.NoGPU {
			env = append(env, contract.EnvSandboxNoGPU+"=1")
		}
		if err := r.start(opts, AgentSpec{Name: fmt.Sprintf("rehearsal%d-%s", i, na.Plan.ID), Config: cfg, Dir: dir, Env: env}, root, progress); err != nil {
			return err
		}
	}
	return nil
}

func (r *Rehearsal) start(opts RehearsalOptions, spec AgentSpec, root string, progress func(string, ...any)) error {
	spec.Binary, spec.Endpoint, spec.Token = opts.AgentBinary, r.Server.AgentEndpoint(), r.Server.AgentToken()
	a, err := StartAgent(spec)
	if err != nil {
		return err
	}
	r.agents = append(r.agents, a)
	progress("agent %s started from %s", spec.Name, root)
	return nil
}

// Env is what kbgen serve, submit and queues need to use this Buildkite,
// as NAME=value.
func (r *Rehearsal) Env() []string {
	env := []string{contract.EnvAPIURL + "=" + r.Server.URL(), contract.EnvAPIToken + "=" + r.Server.Token,
		contract.EnvOrg + "=" + r.Server.Org, contract.EnvPipeline + "=" + r.Server.Pipeline,
		contract.EnvDefaultBootstrapQueue + "=" + contract.ControlQueue, contract.EnvServerToken + "=" + r.ServerToken}
	if r.WebhookSecret != "" {
		env = append(env, contract.EnvWebhookSecret+"="+r.WebhookSecret)
	}
	return env
}

// Exited is the first agent that has stopped, or nil.
func (r *Rehearsal) Exited() *Agent {
	for _, a := range r.agents {
		if a.Exited() {
			return a
		}
	}
	return nil
}

// Close stops the agents (each finishes its job), the server, the
// containers its jobs left, and removes its directory. The error names
// the agents that had to be killed.
func (r *Rehearsal) Close() error {
	var errs []error
	for _, a := range r.agents {
		errs = append(errs, a.Stop(20*time.Second))
		a.Cleanup()
	}
	if r.Server != nil {
		for _, j := range r.Server.AllJobs() {
			_ = exec.Command("docker", "rm", "-f", "kbgen-"+j.ID).Run()
		}
		r.Server.Close()
	}
	errs = append(errs, os.RemoveAll(r.dir))
	return errors.Join(errs...)
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}
