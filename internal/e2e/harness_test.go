package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/internal/bkagent"
	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/fakebuildkite"
	"github.com/gpu-mode/kbgen/internal/kbgenbin"
	"github.com/gpu-mode/kbgen/internal/syncbuf"
	"github.com/gpu-mode/kbgen/internal/testimage"
)

var testTmp string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "kbgen-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testTmp = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// Queues of the test node and of Kernelbot's control agents.
const (
	vendorQueue  = "nvidia-l40s"
	controlQueue = contract.ControlQueue
)

// srcRoot is this checkout's root.
func srcRoot(t testing.TB) string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller")
	}
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// harness is one node of two GPU agents (CPU 0 and CPU 1) rendered by
// `kbgen node install`, one control agent holding the signing key, and the
// local Buildkite they all take jobs from.
type harness struct {
	t    *testing.T
	dir  string
	root string // the node's staging root
	// controlRoot is the control agent's staging root.
	controlRoot string
	bin         string // kbgen and buildkite-agent, first on every PATH
	agentBin    string
	kbgen       string
	image       string
	vendors     string
	privKey     string
	srv         *fakebuildkite.Server
	fixture     *nodeFixture
	node        []NodeAgent
	gpus        []*Agent
	control     *Agent
}

type harnessOpts struct {
	// vendorTimeoutMinutes is the eval step's max-minutes.
	vendorTimeoutMinutes int
	minute               time.Duration
	noControl            bool
	noAgents             bool // render the node, start no agent
	// rewriteUpload plays a compromised Buildkite (fakebuildkite.Options).
	rewriteUpload func([]byte) []byte
	// node is the machine and registry; nil is l40sNode.
	node *nodeFixture
}

// nodeFixture is the machine `kbgen node install` renders, and the
// registry its queues come from.
type nodeFixture struct {
	queue string // the node's one-GPU queue (--queue)
	// install writes the machine's files under h.dir and returns node
	// install's arguments for them (sysfs, tool outputs, shapes, reserve).
	install func(h *harness) []string
	// vendors is the registry of the test, given the image and the eval
	// step's max-minutes.
	vendors func(image string, maxMinutes int) string
	// agentEnv is added to each node agent's env after the defaults (so
	// it may override them: the last value of a name wins).
	agentEnv func(h *harness, na NodeAgent) []string
	// placement, NAME=value, overrides what the agent's environment hook
	// exports (the hook runs in every job, after the agent's env).
	placement func(na NodeAgent) []string
}

// l40sNode is the default node: two L40S "GPUs" on CPU 0 and CPU 1 (see
// writeMachine), one queue.
var l40sNode = &nodeFixture{
	queue: vendorQueue,
	install: func(h *harness) []string {
		h.writeMachine()
		return []string{"--sysfs", filepath.Join(h.dir, "sys"), "--nvidia-smi", filepath.Join(h.dir, "nvidia-smi.csv"),
			"--reserve-cores", "0", "--reserve-memory", "1g"}
	},
	vendors: func(image string, maxMinutes int) string {
		return fmt.Sprintf(`vendors:
  - queue: %s
    donor: NVIDIA
    gpu: L40S
    runtime: nvidia
    arch: "89"
    image: %s
    resources: {gpus: 1, cpus: 1, memory: 1g, shm-size: 64m, pids-limit: 512}
    timeouts: {startup-minutes: 5, max-minutes: %d}
`, vendorQueue, image, maxMinutes)
	},
}

func newHarness(t *testing.T, o harnessOpts) *harness {
	t.Helper()
	testimage.RequireDocker(t)
	agentBin, err := bkagent.Installed(os.Getenv)
	if err != nil {
		t.Skipf("%v; end-to-end tests skipped", err)
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git; end-to-end tests skipped")
	}
	h := &harness{t: t, dir: t.TempDir(), agentBin: agentBin}
	h.image = testimage.Python(t)
	h.bin = filepath.Join(h.dir, "bin")
	must(t, os.MkdirAll(h.bin, 0o755))
	must(t, os.Symlink(kbgenbin.Path(t), filepath.Join(h.bin, "kbgen")))
	must(t, os.Symlink(agentBin, filepath.Join(h.bin, "buildkite-agent")))
	h.kbgen = filepath.Join(h.bin, "kbgen")

	if o.node == nil {
		o.node = l40sNode
	}
	h.fixture = o.node
	h.privKey = filepath.Join(h.dir, "signing-key.json")
	pub := filepath.Join(h.dir, "kernelbot.jwks")
	h.run(nil, "keygen", "--private-out", h.privKey, "--public-out", pub)
	token := filepath.Join(h.dir, "agent-token")
	must(t, os.WriteFile(token, []byte(fakebuildkite.DefaultAgentToken+"\n"), 0o600))
	h.root = filepath.Join(h.dir, "root")
	if o.vendorTimeoutMinutes == 0 {
		o.vendorTimeoutMinutes = 10
	}
	h.vendors = filepath.Join(h.dir, "vendors.yaml")
	must(t, os.WriteFile(h.vendors, []byte(o.node.vendors(h.image, o.vendorTimeoutMinutes)), 0o644))
	install := append([]string{"node", "install", "--root", h.root, "--queue", o.node.queue}, o.node.install(h)...)
	install = append(install, "--plugin", filepath.Join(srcRoot(t), ".buildkite", "plugins", "gpu-docker"),
		"--verification-key", pub, "--agent-binary", agentBin, "--kbgen-path", h.kbgen, "--token-file", token)
	// The registry names the node's shapes (--shape).
	if r := h.run([]string{"KBGEN_VENDORS=" + h.vendors}, install...); r.code != 0 {
		t.Fatalf("kbgen node install: exit %d\n%s", r.code, r.stderr)
	}
	if h.node, err = ReadNode(h.root); err != nil {
		t.Fatal(err)
	}
	// The control agent as kbgen node install --control sets it up: its
	// hooks give the bootstrap the key and the registry, and skip the
	// checkout.
	h.controlRoot = filepath.Join(h.dir, "control-root")
	h.run(nil, "node", "install", "--control", "--root", h.controlRoot, "--signing-key", h.privKey, "--vendors", h.vendors,
		"--spawn", "1", "--agent-binary", agentBin, "--kbgen-path", h.kbgen, "--token-file", token)

	repo := filepath.Join(h.dir, "repo")
	must(t, MakeRepo(repo, srcRoot(t)))
	h.srv, err = fakebuildkite.NewLive(fakebuildkite.Options{Repo: repo, Minute: o.minute, LostAfter: 5 * time.Second, RewriteUpload: o.rewriteUpload})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.srv.Close)
	if o.noAgents {
		return h
	}
	if !o.noControl {
		h.control = h.startControl("control-1")
	}
	for i := range h.node {
		h.gpus = append(h.gpus, h.startGPU(i, fmt.Sprintf("node-gpu%d", i)))
	}
	t.Cleanup(h.removeContainers)
	return h
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// writeMachine writes the sysfs of a machine with one NUMA node of three
// single-thread cores and two L40S GPUs: with no cores reserved, the plan
// gives GPU 0 CPU 0 and GPU 1 CPU 1 (real CPUs of this machine) and leaves
// CPU 2 to the host, which only the systemd slice would use.
func (h *harness) writeMachine() {
	sys := filepath.Join(h.dir, "sys")
	files := map[string]string{
		"devices/system/node/online":             "0\n",
		"devices/system/node/node0/cpulist":      "0-2\n",
		"devices/system/node/node0/meminfo":      "Node 0 MemTotal:        8388608 kB\n",
		"devices/system/cpu/online":              "0-2\n",
		"devices/system/cpu/possible":            "0-2\n",
		"bus/pci/devices/0000:38:00.0/numa_node": "0\n",
		"bus/pci/devices/0000:3a:00.0/numa_node": "0\n",
	}
	for c := 0; c < 3; c++ {
		d := fmt.Sprintf("devices/system/cpu/cpu%d/topology/", c)
		files[d+"core_id"] = fmt.Sprintf("%d\n", c)
		files[d+"physical_package_id"] = "0\n"
		files[d+"thread_siblings_list"] = fmt.Sprintf("%d\n", c)
	}
	fixture := filepath.Join(srcRoot(h.t), "node", "testdata", "l40sx2")
	for _, dev := range []string{"0000:38:00.0", "0000:3a:00.0"} {
		for _, f := range []string{"class", "vendor", "device"} {
			b, err := os.ReadFile(filepath.Join(fixture, "sys", "bus", "pci", "devices", dev, f))
			must(h.t, err)
			files["bus/pci/devices/"+dev+"/"+f] = string(b)
		}
	}
	for name, content := range files {
		p := filepath.Join(sys, name)
		must(h.t, os.MkdirAll(filepath.Dir(p), 0o755))
		must(h.t, os.WriteFile(p, []byte(content), 0o644))
	}
	smi, err := os.ReadFile(filepath.Join(fixture, "nvidia-smi.csv"))
	must(h.t, err)
	must(h.t, os.WriteFile(filepath.Join(h.dir, "nvidia-smi.csv"), smi, 0o644))
}

// path is the PATH of agents and the CLI: kbgen and the agent first.
func (h *harness) path() string { return "PATH=" + h.bin + ":" + os.Getenv("PATH") }

// startControl starts the control agent kbgen node install --control
// rendered, with its config and hooks.
func (h *harness) startControl(name string) *Agent {
	dir := filepath.Join(h.dir, "agents", name)
	ca, err := ReadControl(h.controlRoot)
	must(h.t, err)
	cfg, err := ca.Prepare(h.controlRoot, dir)
	must(h.t, err)
	a, err := StartAgent(AgentSpec{Binary: h.agentBin, Name: name, Endpoint: h.srv.AgentEndpoint(), Token: h.srv.AgentToken(),
		Config: cfg, Dir: dir, Env: []string{h.path(), "HOME=" + dir}})
	must(h.t, err)
	h.t.Cleanup(func() { h.stopAgent(a) })
	return a
}

// startGPU starts node agent i with its rendered config, env and hooks.
func (h *harness) startGPU(i int, name string) *Agent {
	na := h.node[i]
	dir := filepath.Join(h.dir, "agents", name)
	cfg, err := na.Prepare(h.root, dir)
	must(h.t, err)
	if h.fixture.placement != nil {
		hook, err := os.OpenFile(filepath.Join(dir, "hooks", "environment"), os.O_APPEND|os.O_WRONLY, 0)
		must(h.t, err)
		for _, kv := range h.fixture.placement(na) {
			_, err = fmt.Fprintf(hook, "export %s\n", kv)
			must(h.t, err)
		}
		must(h.t, hook.Close())
	}
	env := append(append([]string{}, na.Env...), h.path(), "HOME="+dir, "KBGEN_SANDBOX_NO_GPU=1")
	if h.fixture.agentEnv != nil {
		env = append(env, h.fixture.agentEnv(h, na)...)
	}
	a, err := StartAgent(AgentSpec{Binary: h.agentBin, Name: name, Endpoint: h.srv.AgentEndpoint(), Token: h.srv.AgentToken(),
		Config: cfg, Dir: dir, Env: env})
	must(h.t, err)
	h.t.Cleanup(func() { h.stopAgent(a) })
	return a
}

func (h *harness) stopAgent(a *Agent) {
	if err := a.Stop(15 * time.Second); err != nil {
		h.t.Log(err)
	}
	a.Cleanup()
	if h.t.Failed() {
		h.t.Logf("agent %s log (tail):\n%s", a.Name, tail(a.Log(), 40))
	}
}

// removeContainers removes any container a job of this test left.
func (h *harness) removeContainers() {
	for _, j := range h.srv.AllJobs() {
		_ = exec.Command("docker", "rm", "-f", "kbgen-"+j.ID).Run()
	}
}

// cliEnv is the env kbgen submit runs with against the local Buildkite.
// startServe starts `kbgen serve` on a unix socket in the harness's dir,
// polling every pollEvery, and waits until it listens; log collects its
// stderr for failure messages. It is killed when the test ends.
func (h *harness) startServe(t *testing.T, pollEvery string) (sock string, log *syncbuf.Buffer) {
	t.Helper()
	sock = filepath.Join(h.dir, "serve.sock")
	serve := exec.Command(h.kbgen, "serve", "--listen", "unix:"+sock, "--poll-interval", pollEvery)
	serve.Env = h.cliEnv()
	log = &syncbuf.Buffer{}
	pipe, err := serve.StderrPipe()
	must(t, err)
	must(t, serve.Start())
	t.Cleanup(func() { _ = serve.Process.Kill(); _ = serve.Wait() })
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			log.Write([]byte(sc.Text() + "\n"))
			if strings.Contains(sc.Text(), "listening on") {
				close(ready)
			}
		}
	}()
	select {
	case <-ready:
	case <-time.After(30 * time.Second):
		t.Fatalf("kbgen serve did not start:\n%s", log.String())
	}
	return sock, log
}

func (h *harness) cliEnv() []string {
	return []string{h.path(), "BUILDKITE_API_URL=" + h.srv.URL(), "BUILDKITE_API_TOKEN=" + h.srv.Token,
		"BUILDKITE_ORG=" + h.srv.Org, "BUILDKITE_PIPELINE=" + h.srv.Pipeline, "KBGEN_VENDORS=" + h.vendors,
		"KBGEN_BOOTSTRAP_QUEUE=" + controlQueue, "HOME=" + h.dir}
}

type cliResult struct {
	stdout, stderr string
	code           int
}

// run runs kbgen with the CLI env and fails the test on a non-zero exit
// unless env is given (then the caller judges the result).
func (h *harness) run(env []string, args ...string) cliResult {
	h.t.Helper()
	r := h.runCtx(context.Background(), env, args...)
	if env == nil && r.code != 0 {
		h.t.Fatalf("kbgen %s: exit %d\n%s%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r
}

func (h *harness) runCtx(ctx context.Context, env []string, args ...string) cliResult {
	cmd := exec.CommandContext(ctx, h.kbgen, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := cliResult{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		h.t.Fatalf("kbgen %s: %v", strings.Join(args, " "), err)
	}
	return r
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
