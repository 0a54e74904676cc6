package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/internal/fakebuildkite"
	"github.com/gpu-mode/kbgen/internal/kbgenbin"
	"github.com/gpu-mode/kbgen/payload"
	"github.com/gpu-mode/kbgen/sandbox"
)

// comparable is what must agree between two runs of one job: everything
// but timings, host names, paths and the system it ran on.
func comparable(t *testing.T, raw string) map[string]any {
	t.Helper()
	var res payload.FullResult
	if err := json.Unmarshal([]byte(strings.TrimSpace(raw)), &res); err != nil {
		t.Fatalf("not a FullResult: %v\n%s", err, raw)
	}
	out := map[string]any{"success": res.Success, "error": res.Error}
	for name, run := range res.Runs {
		r := map[string]any{"compilation": run.Compilation != nil}
		if run.Run != nil {
			r["run.success"] = run.Run.Success
			r["run.passed"] = run.Run.Passed
			r["run.exit_code"] = run.Run.ExitCode
			r["run.stdout"] = run.Run.Stdout
			r["run.stderr"] = run.Run.Stderr
			r["run.result"] = run.Run.Result
		}
		out["runs."+name] = r
	}
	return out
}

// TestSubmitExample: kbgen submit of the example job through the local
// Buildkite gives the FullResult kbgen local gives (timings aside); the
// bootstrap ran on the control queue, the eval step on the vendor queue.
func TestSubmitExample(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	got := h.run(h.cliEnv(), "submit", "--queue", vendorQueue, "--example", "vectoradd", "--mode", "test", "--run-id", "e2e-example", "--timeout", "3m")
	if got.code != 0 {
		t.Fatalf("submit: exit %d\n%s\n%s\njobs: %+v", got.code, got.stdout, got.stderr, h.srv.AllJobs())
	}
	want := h.run(nil, "local", "--example", "vectoradd", "--mode", "test", "--json")
	if g, w := comparable(t, got.stdout), comparable(t, want.stdout); !reflect.DeepEqual(g, w) {
		t.Errorf("submit's FullResult differs from kbgen local's:\nsubmit: %v\nlocal:  %v", g, w)
	}
	jobs := h.srv.Jobs(1)
	if len(jobs) != 2 {
		t.Fatalf("%d jobs, want bootstrap and eval: %+v", len(jobs), jobs)
	}
	if j := jobs[0]; j.Key != "bootstrap" || j.Queue != controlQueue || j.Agent != "control-1" || j.State != "passed" {
		t.Errorf("bootstrap job %s on queue %s agent %s: %s", j.Key, j.Queue, j.Agent, j.State)
	}
	if j := jobs[1]; j.Key != "eval" || j.Queue != vendorQueue || !strings.HasPrefix(j.Agent, "node-gpu") || j.State != "passed" {
		t.Errorf("eval job %s on queue %s agent %s: %s\n%s", j.Key, j.Queue, j.Agent, j.State, tail(j.Log, 30))
	}
	t.Logf("stderr of submit:\n%s", got.stderr)
}

// cpusetSubmission is the example's correct submission, which also
// prints, from inside the container, the CPUs it may run on.
const cpusetSubmission = `import re
from task import input_t, output_t

with open("/proc/self/status") as f:
    print("CPUSET=" + re.search(r"Cpus_allowed_list:\s*(\S+)", f.read()).group(1), flush=True)


def custom_kernel(data: input_t) -> output_t:
    a, b = data["a"], data["b"]
    return [a[i] + b[i] for i in range(len(a))]
`

// TestTwelveBuildsTwoAgents: 12 builds submitted at once over the two GPU
// agents all give a result; no agent ever ran two jobs at once; every eval
// container saw exactly its agent's CPU (from /proc/self/status inside).
func TestTwelveBuildsTwoAgents(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	sub := filepath.Join(h.dir, "cpuset.py")
	must(t, os.WriteFile(sub, []byte(cpusetSubmission), 0o644))
	const n = 12
	results := make([]cliResult, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = h.run(h.cliEnv(), "submit", "--queue", vendorQueue, "--example", "vectoradd", "--submission", sub,
				"--mode", "test", "--run-id", fmt.Sprintf("e2e-twelve-%d", i), "--timeout", "4m", "--quiet")
		}()
	}
	wg.Wait()
	cpusetOf := map[string]string{}
	for i, na := range h.node {
		cpusetOf[h.gpus[i].Name] = na.Plan.CPUSet
	}
	// Which agent ran each build's eval, and what its container saw.
	evalAgent := map[string]string{} // run id → agent
	for num := 1; num <= n; num++ {
		env, _, _ := h.srv.CreatedEnv(num)
		for _, j := range h.srv.Jobs(num) {
			if j.Key == "eval" && j.State == "passed" {
				evalAgent[env["KERNELBOT_RUN_ID"]] = j.Agent
			}
		}
	}
	seen := map[string]bool{}
	for i, r := range results {
		if r.code != 0 {
			t.Errorf("submit %d: exit %d\n%s", i, r.code, tail(r.stderr, 10))
			continue
		}
		var res payload.FullResult
		if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || !res.Success || res.Runs["test"].Run == nil || !res.Runs["test"].Run.Passed {
			t.Errorf("submit %d: not a passing FullResult (%v):\n%s", i, err, r.stdout)
			continue
		}
		agent := evalAgent[fmt.Sprintf("e2e-twelve-%d", i)]
		stdout := res.Runs["test"].Run.Stdout + res.Runs["test"].Run.Stderr // the worker sends prints to stderr
		if want := "CPUSET=" + cpusetOf[agent] + "\n"; agent == "" || !strings.Contains(stdout, want) {
			t.Errorf("submit %d ran on %q (cpuset %q) but its container printed %q", i, agent, cpusetOf[agent], stdout)
		}
		seen[agent+" "+strings.TrimSpace(stdout)] = true
	}
	perAgent := map[string][]fakebuildkite.JobInfo{}
	for _, j := range h.srv.AllJobs() {
		perAgent[j.Agent] = append(perAgent[j.Agent], j)
	}
	for agent, jobs := range perAgent {
		sort.Slice(jobs, func(a, b int) bool { return jobs[a].Accepted.Before(jobs[b].Accepted) })
		for k := 1; k < len(jobs); k++ {
			if jobs[k].Accepted.Before(jobs[k-1].Finished) {
				t.Errorf("agent %s took job %s at %s while job %s ran until %s", agent, jobs[k].ID, jobs[k].Accepted, jobs[k-1].ID, jobs[k-1].Finished)
			}
		}
		t.Logf("agent %s ran %d jobs", agent, len(jobs))
	}
	if len(perAgent[h.gpus[0].Name]) == 0 || len(perAgent[h.gpus[1].Name]) == 0 {
		t.Errorf("the evals did not spread over both GPU agents: %v", keys(perAgent))
	}
	t.Logf("containers reported: %v", keys(seen))
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// evalJob waits until build n's eval job is running, and returns it.
func (h *harness) evalJob(n int, limit time.Duration) fakebuildkite.JobInfo {
	h.t.Helper()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		for _, j := range h.srv.Jobs(n) {
			if j.Key == "eval" && j.State == "running" {
				return j
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	h.t.Fatalf("build %d: no eval job running after %s: %+v", n, limit, h.srv.Jobs(n))
	return fakebuildkite.JobInfo{}
}

// containerGone reports whether the job's container no longer exists.
func containerGone(jobID string) bool {
	out, err := exec.Command("docker", "ps", "-aq", "--filter", "name=^kbgen-"+jobID+"$").Output()
	return err == nil && strings.TrimSpace(string(out)) == ""
}

// jobProcesses lists the host processes that carry the job's id in their
// environment (the bootstrap, the hook, kbgen sandbox, docker run).
func jobProcesses(jobID string) []string {
	var out []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil || !bytes.Contains(env, []byte("BUILDKITE_JOB_ID="+jobID+"\x00")) {
			continue
		}
		cmd, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		out = append(out, e.Name()+" "+strings.ReplaceAll(string(cmd), "\x00", " "))
	}
	return out
}

// TestSubmitTimeoutCancels: kbgen submit --timeout running out while the
// benchmark hangs cancels the build; the agent learns it, the sandbox
// stops the container, and within the stop timeout (plus the agent's
// cancel grace) nothing of the job is left on the host.
func TestSubmitTimeoutCancels(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	done := make(chan cliResult, 1)
	go func() {
		done <- h.runCtx(ctx, h.cliEnv(), "submit", "--queue", vendorQueue, "--example", "vectoradd", "--submission", "hang",
			"--mode", "benchmark", "--run-id", "e2e-timeout", "--timeout", "15s")
	}()
	ev := h.evalJob(1, 2*time.Minute)
	r := <-done
	canceledAt := time.Now()
	if r.code != 5 {
		t.Errorf("submit exit %d, want 5 (timeout, build canceled)\n%s", r.code, tail(r.stderr, 10))
	}
	limit := sandbox.DefaultStopTimeout + 10*time.Second
	var left []string
	for time.Since(canceledAt) < limit {
		left = jobProcesses(ev.ID)
		if len(left) == 0 && containerGone(ev.ID) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !containerGone(ev.ID) || len(left) > 0 {
		t.Fatalf("%s after the cancel: container gone %v, processes left %v", limit, containerGone(ev.ID), left)
	}
	t.Logf("container and processes gone %s after submit returned", time.Since(canceledAt).Round(100*time.Millisecond))
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) && h.srv.Jobs(1)[1].State != "canceled" {
		time.Sleep(100 * time.Millisecond)
	}
	if j := h.srv.Jobs(1)[1]; j.State != "canceled" {
		t.Errorf("eval job %s, want canceled", j.State)
	}
}

// TestAgentKilledMidJob: SIGKILL of the agent running the eval step; the
// server marks it lost, the job ends -1, retry.automatic runs it on the
// other agent, and submit still gets a result.
func TestAgentKilledMidJob(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	done := make(chan cliResult, 1)
	go func() {
		done <- h.run(h.cliEnv(), "submit", "--queue", vendorQueue, "--example", "vectoradd", "--mode", "test", "--run-id", "e2e-kill", "--timeout", "3m")
	}()
	ev := h.evalJob(1, 2*time.Minute)
	var victim *Agent
	for _, a := range h.gpus {
		if a.Name == ev.Agent {
			victim = a
		}
	}
	victim.Kill()
	r := <-done
	jobs := h.srv.Jobs(1)
	if r.code != 0 {
		t.Fatalf("submit exit %d\n%s\njobs %+v", r.code, tail(r.stderr, 10), jobs)
	}
	if len(jobs) != 3 {
		t.Fatalf("%d jobs, want bootstrap, the lost eval and its retry: %+v", len(jobs), jobs)
	}
	lost, retry := jobs[1], jobs[2]
	if lost.Agent != victim.Name || lost.Exit == nil || *lost.Exit != -1 || lost.SignalReason != "" || !lost.Retried {
		t.Errorf("killed job: agent %s exit %v reason %q retried %v; want %s, -1, no signal reason, retried", lost.Agent, lost.Exit, lost.SignalReason, lost.Retried, victim.Name)
	}
	if retry.Agent == victim.Name || retry.State != "passed" {
		t.Errorf("retry on %s: %s; want passed on the other agent", retry.Agent, retry.State)
	}
}

// TestImageMissingOnOneAgent: on one agent the runner image is absent
// (its docker client asks the engine for a tag no one built); the sandbox
// exits 75, the gpu-docker hook takes that agent out of rotation (SIGTERM:
// it finishes the job and disconnects instead of pinging for the retry,
// which it would otherwise win: it is idle first), says so in the job log,
// and the retry runs on the other agent, which was idle all along.
func TestImageMissingOnOneAgent(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	wrapped := filepath.Join(h.dir, "nodocker")
	must(t, os.MkdirAll(wrapped, 0o755))
	realDocker, err := exec.LookPath("docker")
	must(t, err)
	must(t, os.WriteFile(filepath.Join(wrapped, "docker"), fmt.Appendf(nil, "#!/bin/sh\n# This host lacks the runner image: ask for a tag that does not exist.\nfor a; do shift; if [ \"$a\" = %q ]; then a=kbgen-test-absent:e2e; fi; set -- \"$@\" \"$a\"; done\nexec %s \"$@\"\n", h.image, realDocker), 0o755))
	_ = h.gpus[0].Stop(15 * time.Second)
	_ = h.gpus[1].Stop(15 * time.Second)
	na := h.node[0]
	dir := filepath.Join(h.dir, "agents", "noimage")
	cfg, err := na.Prepare(h.root, dir)
	must(t, err)
	a, err := StartAgent(AgentSpec{Binary: h.agentBin, Name: "noimage", Endpoint: h.srv.AgentEndpoint(), Token: h.srv.AgentToken(),
		Config: cfg, Dir: dir, Env: append(append([]string{}, na.Env...), "PATH="+wrapped+":"+h.bin+":"+os.Getenv("PATH"), "HOME="+dir, "KBGEN_SANDBOX_NO_GPU=1")})
	must(t, err)
	t.Cleanup(func() { h.stopAgent(a) })
	done := make(chan cliResult, 1)
	go func() {
		done <- h.run(h.cliEnv(), "submit", "--queue", vendorQueue, "--example", "vectoradd", "--mode", "test", "--run-id", "e2e-noimage", "--timeout", "3m")
	}()
	// Once noimage has taken the first attempt, a healthy agent joins and
	// idles: both are there when the retry is made.
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		if js := h.srv.Jobs(1); len(js) >= 2 && js[1].Agent == "noimage" {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	h.startGPU(1, "node-gpu1-again")
	r := <-done
	jobs := h.srv.Jobs(1)
	if r.code != 0 {
		t.Fatalf("submit exit %d\n%s\njobs %+v", r.code, tail(r.stderr, 10), jobs)
	}
	if len(jobs) != 3 || jobs[1].Agent != "noimage" || jobs[1].Exit == nil || *jobs[1].Exit != 75 || jobs[2].Agent != "node-gpu1-again" || jobs[2].State != "passed" {
		for _, j := range jobs {
			t.Logf("job %s on %s: %s exit %v\n%s", j.Key, j.Agent, j.State, j.Exit, tail(j.Log, 8))
		}
		t.Fatalf("want the eval to exit 75 on noimage and pass on node-gpu1-again")
	}
	if !strings.Contains(jobs[1].Log, "stopping agent noimage") {
		t.Errorf("the failed job's log does not say the agent leaves rotation:\n%s", tail(jobs[1].Log, 12))
	}
	stopped := time.Now().Add(30 * time.Second)
	for !a.Exited() && time.Now().Before(stopped) {
		time.Sleep(100 * time.Millisecond)
	}
	if !a.Exited() || !strings.Contains(a.Log(), "Gracefully stopping agent") {
		t.Errorf("agent noimage still running after its exit 75 (exited %v):\n%s", a.Exited(), tail(a.Log(), 12))
	}
}

// TestE2EOverhead prints where an eval and a bootstrap job spend their
// time on the agent (docs/performance.md records it). It asserts only that
// the phases were found (the eval job's container exit and publish
// included); the numbers are for reading.
func TestE2EOverhead(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	// Three test runs, whose result rides on the build's meta-data alone
	// (nothing to upload), and one benchmark run, whose noise.json is
	// uploaded as its job's artifact: the agent's uploader loop, once.
	modes := []string{"test", "test", "test", "benchmark"}
	builds := len(modes)
	for i, mode := range modes {
		if r := h.run(h.cliEnv(), "submit", "--queue", vendorQueue, "--example", "vectoradd", "--mode", mode, "--run-id", fmt.Sprintf("overhead-%d", i), "--timeout", "3m", "--quiet"); r.code != 0 {
			t.Fatalf("build %d: submit exit %d\n%s%s", i+1, r.code, r.stdout, tail(r.stderr, 10))
		}
	}
	for n := 1; n <= builds; n++ {
		for _, j := range h.srv.Jobs(n) {
			ps := Phases(j.Log, j.Accepted, j.Finished)
			if len(ps) < 4 {
				t.Fatalf("build %d job %s: phases not found in its log:\n%s", n, j.Key, j.Log)
			}
			var eval time.Duration
			seen := map[string]bool{}
			for _, p := range ps {
				seen[p.Name] = true
				if strings.HasPrefix(p.Name, "evaluation") {
					eval = p.Took
				}
			}
			if j.Key == "eval" && (!seen["container exit and removal, vouch"] || !seen["hook's publish"]) {
				t.Errorf("build %d: the eval job's log lacks the container-exit or publish mark:\n%s", n, FormatPhases(ps))
			}
			t.Logf("build %d (%s), %s job on %s: overhead %.2f s (accept → finish %.2f s minus evaluation %.2f s)\n%s", n, modes[n-1], j.Key, j.Agent,
				(j.Finished.Sub(j.Accepted) - eval).Seconds(), j.Finished.Sub(j.Accepted).Seconds(), eval.Seconds(), FormatPhases(ps))
		}
	}
}

// TestDoctorE2E: kbgen doctor --e2e --root on a node rendered by kbgen
// node install, without a GPU, runs the example through a temporary agent
// with the node's config for GPU 1, prints the result and the phases, and
// leaves no temp dir, agent or container behind.
func TestDoctorE2E(t *testing.T) {
	h := newHarness(t, harnessOpts{noAgents: true})
	kbgenbin.E2EPath(t) // beside kbgen, where doctor --e2e finds it
	tmp := filepath.Join(h.dir, "tmp")
	must(t, os.MkdirAll(tmp, 0o755))
	r := h.run([]string{h.path(), "TMPDIR=" + tmp, "KBGEN_VENDORS=" + h.vendors, "KBGEN_SANDBOX_NO_GPU=1"},
		"doctor", "--e2e", "--gpu", "1", "--root", h.root, "--timeout", "3m")
	if r.code != 0 {
		t.Fatalf("doctor --e2e: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{"job bootstrap on doctor-gpu1: passed", "job eval on doctor-gpu1: passed", "evaluation (kbgen run)", "container exit and removal, vouch", "hook's publish", `"success":true`, "PASS  e2e"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("doctor --e2e output lacks %q:\n%s", want, r.stdout)
		}
	}
	left, _ := os.ReadDir(tmp)
	for _, e := range left {
		if strings.HasPrefix(e.Name(), "kbgen-doctor-e2e-") {
			t.Errorf("doctor --e2e left %s in TMPDIR", e.Name())
		}
	}
	if out, _ := exec.Command("pgrep", "-f", "--name doctor-gpu1").Output(); len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("doctor --e2e left its agent running: pids %s", out)
	}
	if out, _ := exec.Command("docker", "ps", "-aq", "--filter", "name=^kbgen-").Output(); len(bytes.TrimSpace(out)) > 0 {
		t.Logf("containers named kbgen-* exist (maybe other tests'): %s", out)
	}
	t.Logf("doctor --e2e output:\n%s", r.stdout)
}
