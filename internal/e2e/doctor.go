package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/fakebuildkite"
	"github.com/gpu-mode/kbgen/node"
	"github.com/gpu-mode/kbgen/signing"
)

// DoctorOptions say which node agent `kbgen doctor --e2e` proves.
type DoctorOptions struct {
	Root  string // where `kbgen node install` wrote the node
	GPU   int    // the GPU whose agent config is used
	Kbgen string // this kbgen binary: the agent's PATH gets its directory
	// AgentBinary is the buildkite-agent to start (bkagent.Installed finds it).
	AgentBinary string
	Image       string // runner image override (submit --image); "" = the registry's
	Example     string // built-in example to run; default vectoradd
	Mode        string // default test
	Timeout     time.Duration
	// Progress receives one line per step (may be nil).
	Progress func(format string, args ...any)
}

// DoctorReport is what one --e2e run found.
type DoctorReport struct {
	Result     string // the FullResult JSON kbgen submit printed
	ExitCode   int    // kbgen submit's exit status
	Stderr     string // kbgen submit's progress and errors
	Jobs       []fakebuildkite.JobInfo
	Total      time.Duration
	AgentLog   string
	SubmitArgs []string
}

// doctorPipeline is the pipeline's own step under doctor: the bootstrap,
// on the node's own queue (as .buildkite/pipeline.yml routes it when no
// control queue is set), since a vendor node has no control agent.
const doctorPipeline = `steps:
  - key: bootstrap
    label: ":pipeline: kbgen generate"
    command: kbgen generate --upload
    agents:
      queue: "${KERNELBOT_QUEUE}"
    timeout_in_minutes: 5
`

// RunDoctor starts a local Buildkite and one temporary agent with the
// node's real config, environment and hooks for GPU opts.GPU, submits the
// example job through `kbgen submit`, and removes everything it made.
func RunDoctor(ctx context.Context, opts DoctorOptions) (*DoctorReport, error) {
	progress := opts.Progress
	if progress == nil {
		progress = func(string, ...any) {}
	}
	if opts.Example == "" {
		opts.Example = "vectoradd"
	}
	if opts.Mode == "" {
		opts.Mode = "test"
	}
	agents, err := ReadNode(opts.Root)
	if err != nil {
		return nil, err
	}
	var na *NodeAgent
	for i := range agents {
		if agents[i].Plan.GPU.Index == opts.GPU {
			na = &agents[i]
		}
	}
	if na == nil {
		return nil, fmt.Errorf("the node under %s has no agent for GPU %d (see kbgen node plan)", opts.Root, opts.GPU)
	}
	if opts.AgentBinary == "" {
		return nil, errors.New("no buildkite-agent binary given")
	}
	tmp, err := os.MkdirTemp("", "kbgen-doctor-e2e-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)

	// The repository the agent checks out holds only the plugin: the
	// node's post-checkout hook replaces it with the pinned copy anyway.
	repo := filepath.Join(tmp, "repo")
	plugin := filepath.Join(opts.Root, node.PluginDir)
	if _, err := os.Stat(filepath.Join(plugin, "hooks", "command")); err != nil {
		return nil, fmt.Errorf("no pinned gpu-docker plugin at %s (run kbgen node install --plugin): %w", plugin, err)
	}
	if err := os.MkdirAll(filepath.Join(repo, ".buildkite", "plugins"), 0o755); err != nil {
		return nil, err
	}
	if out, err := exec.Command("cp", "-R", plugin, filepath.Join(repo, ".buildkite", "plugins", "gpu-docker")).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("copying the plugin: %v: %s", err, out)
	}
	if err := commitAll(repo); err != nil {
		return nil, err
	}
	srv, err := fakebuildkite.NewLive(fakebuildkite.Options{Pipeline: []byte(doctorPipeline), Repo: repo})
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	progress("local Buildkite at %s (Agent API %s)", srv.URL(), srv.AgentEndpoint())

	dir := filepath.Join(tmp, "agent")
	cfg, err := na.Prepare(opts.Root, dir)
	if err != nil {
		return nil, err
	}
	signingKey, err := doctorKeys(opts.Root, tmp, dir, cfg)
	if err != nil {
		return nil, err
	}
	path := "PATH=" + filepath.Dir(opts.Kbgen) + ":" + os.Getenv("PATH")
	name := "doctor-" + na.Plan.ID
	a, err := StartAgent(AgentSpec{Binary: opts.AgentBinary, Name: name, Endpoint: srv.AgentEndpoint(), Token: srv.AgentToken(),
		Config: cfg, Dir: dir, Env: append(append([]string{}, na.Env...), path, "HOME="+dir, contract.EnvSigningKey+"="+signingKey)})
	if err != nil {
		return nil, err
	}
	defer a.Cleanup()
	progress("agent %s started with %s", name, na.Config)

	args := []string{"submit", "--queue", na.Queue, "--example", opts.Example, "--mode", opts.Mode, "--run-id", "doctor-e2e-" + strconv.Itoa(os.Getpid()), "--progress", "text"}
	if opts.Image != "" {
		args = append(args, "--image", opts.Image)
	}
	if opts.Timeout > 0 {
		args = append(args, "--timeout", opts.Timeout.String())
	}
	cmd := exec.CommandContext(ctx, opts.Kbgen, args...)
	cmd.Env = append(os.Environ(), path, "BUILDKITE_API_URL="+srv.URL(), "BUILDKITE_API_TOKEN="+srv.Token,
		"BUILDKITE_ORG="+srv.Org, "BUILDKITE_PIPELINE="+srv.Pipeline, "KBGEN_BOOTSTRAP_QUEUE=")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err = cmd.Run()
	rep := &DoctorReport{Result: stdout.String(), Stderr: stderr.String(), Total: time.Since(start), SubmitArgs: args}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		rep.ExitCode = ee.ExitCode()
	default:
		return nil, fmt.Errorf("running kbgen submit: %w", err)
	}
	// Stop the agent (it disconnects) so nothing outlives the check.
	if err := a.Stop(20 * time.Second); err != nil {
		progress("%v", err)
	}
	rep.AgentLog = a.Log()
	rep.Jobs = srv.AllJobs()
	for _, j := range rep.Jobs {
		_ = exec.Command("docker", "rm", "-f", "kbgen-"+j.ID).Run()
	}
	return rep, nil
}

func commitAll(dir string) error {
	for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"add", "."}, {"commit", "-q", "-m", "kbgen doctor"}} {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), gitEnv...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("git %v: %v: %s", args, err, out)
		}
	}
	return nil
}

// doctorKeys makes a throwaway signing key for the doctor's own bootstrap
// (a vendor does not hold Kernelbot's) and points the copied environment
// hook in agentDir and the copied agent config cfg at its public half
// instead of the node's verification key, so a node that verifies steps
// (the agent itself, and kbgen sandbox) checks the doctor's step for real.
// It returns the private key file.
func doctorKeys(root, tmp, agentDir, cfg string) (string, error) {
	kp, err := signing.Generate("", "kbgen-doctor")
	if err != nil {
		return "", err
	}
	priv, pub := filepath.Join(tmp, "doctor-signing.jwks"), filepath.Join(tmp, "doctor-verification.jwks")
	if err := os.WriteFile(priv, kp.Private, 0o600); err != nil {
		return "", err
	}
	if err := os.WriteFile(pub, kp.Public, 0o644); err != nil {
		return "", err
	}
	for _, f := range []string{filepath.Join(agentDir, "hooks", "environment"), cfg} {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		b = bytes.ReplaceAll(b, []byte(filepath.Join(root, node.JWKSFile)), []byte(pub))
		if err := os.WriteFile(f, b, 0o755); err != nil {
			return "", err
		}
	}
	return priv, nil
}
