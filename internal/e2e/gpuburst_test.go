package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/fakebuildkite"
	"github.com/gpu-mode/kbgen/payload"
)

// slowSubmission is the example's correct submission, slowed: each
// container holds its GPUs a few seconds, so the burst's jobs contend.
const slowSubmission = `import time
from task import input_t, output_t

time.sleep(2)


def custom_kernel(data: input_t) -> output_t:
    a, b = data["a"], data["b"]
    return [a[i] + b[i] for i in range(len(a))]
`

// TestGPUNodeBurst: a node of four "GPUs" (l4x4Node) with four one-GPU
// agents, two two-GPU agents and a four-GPU agent over the same GPUs,
// real agents, real containers through kbgen sandbox, and a burst of
// mixed builds:
//   - every build passes, and every container got exactly its agent's
//     GPUs, as many as its queue gives a step;
//   - no two containers held one GPU at once (fakeToolkit's record);
//   - the four-GPU job, submitted into a queue of one-GPU builds that
//     keeps growing, gets its GPUs within a bound: writer preference
//     makes it wait for the jobs already on its GPUs, not for new ones;
//   - SIGKILL of a two-GPU agent and its job's processes while the job
//     holds its lease frees the lease (the kernel drops the flocks):
//     the four-GPU job, submitted after the kill, gets those GPUs too,
//     and the lost job's retry passes on the other two-GPU agent.
func TestGPUNodeBurst(t *testing.T) {
	h := newHarness(t, harnessOpts{node: l4x4Node})
	h.startControl("control-2") // bootstraps two at a time
	began := time.Now()
	b := newBurst(h)
	for i := range 4 {
		b.submit(l4Queue, fmt.Sprintf("one-%d", i))
	}
	b.submit(l4x2Queue, "two-0")
	b.submit(l4x2Queue, "two-1")
	killed := b.killLeaseHolder(l4x2Queue, 3*time.Minute)
	// The four-GPU job needs the killed job's GPUs too. Once its agent
	// has it, one-GPU builds keep arriving while it waits and runs.
	b.submit(l4x4Queue, "four")
	b.waitAccepted("four", 3*time.Minute)
	for n := 4; !b.done("four") && n < 10; n++ {
		b.submit(l4Queue, fmt.Sprintf("one-%d", n))
		time.Sleep(2 * time.Second)
	}
	b.wg.Wait()
	t.Logf("burst of %d builds: %s", len(b.submitted), time.Since(began).Round(time.Second))

	b.checkResults()
	cs, err := readContainers(h.containerLog())
	must(t, err)
	jobs := map[string]fakebuildkite.JobInfo{}
	for _, j := range h.srv.AllJobs() {
		jobs[j.ID] = j
	}
	b.checkGPUs(cs, jobs, killed)
	b.checkKill(cs, jobs, killed)
	b.checkWriterPreference(cs, jobs)
}

// burst submits builds concurrently and keeps their results.
type burst struct {
	h         *harness
	sub, task string
	wg        sync.WaitGroup
	mu        sync.Mutex
	results   map[string]cliResult // run id → kbgen submit's result
	submitted map[string]time.Time
	queue     map[string]string // run id → queue
}

func newBurst(h *harness) *burst {
	b := &burst{h: h, results: map[string]cliResult{}, submitted: map[string]time.Time{}, queue: map[string]string{}}
	b.sub = filepath.Join(h.dir, "slow.py")
	must(h.t, os.WriteFile(b.sub, []byte(slowSubmission), 0o644))
	b.task = writeMultiGPUTask(h)
	return b
}

// writeMultiGPUTask writes the vectoradd example as a multi_gpu task
// (world_size 2 in every case) and returns its directory.
func writeMultiGPUTask(h *harness) string {
	ex := filepath.Join(srcRoot(h.t), "examples")
	dir := filepath.Join(h.dir, "multigpu")
	must(h.t, os.MkdirAll(dir, 0o755))
	for _, f := range []string{"vectoradd/task.py", "vectoradd/reference.py", "utils.py", "eval.py", "worker.py"} {
		data, err := os.ReadFile(filepath.Join(ex, f))
		must(h.t, err)
		// The example's harness reads case keys of letters only and passes
		// each case to generate_input whole: world_size needs both.
		text := strings.Replace(string(data), "def generate_input(size, seed):", "def generate_input(size, seed, world_size=1):", 1)
		text = strings.Replace(text, `\s*([a-zA-Z]+):`, `\s*([a-zA-Z_]+):`, 1)
		data = []byte(text)
		must(h.t, os.WriteFile(filepath.Join(dir, filepath.Base(f)), data, 0o644))
	}
	must(h.t, os.WriteFile(filepath.Join(dir, "task.yml"), []byte(`files:
  - {"name": "submission.py", "source": "@SUBMISSION@"}
  - {"name": "task.py", "source": "task.py"}
  - {"name": "utils.py", "source": "utils.py"}
  - {"name": "reference.py", "source": "reference.py"}
  - {"name": "eval.py", "source": "eval.py"}
  - {"name": "worker.py", "source": "worker.py"}
lang: "py"
config: {main: "eval.py"}
multi_gpu: true
tests:
  - {"size": 127, "seed": 5236, "world_size": 2}
benchmarks:
  - {"size": 2048, "seed": 42, "world_size": 2}
ranking_by: "last"
`), 0o644))
	return dir
}

func (b *burst) submit(queue, id string) {
	args := []string{"submit", "--queue", queue, "--submission", b.sub, "--mode", "test", "--run-id", id, "--timeout", "4m", "--quiet"}
	if queue == l4Queue {
		args = append(args, "--example", "vectoradd")
	} else {
		args = append(args, "--task", b.task)
	}
	b.mu.Lock()
	b.submitted[id], b.queue[id] = time.Now(), queue
	b.mu.Unlock()
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		r := b.h.run(b.h.cliEnv(), args...)
		b.mu.Lock()
		b.results[id] = r
		b.mu.Unlock()
	}()
}

// waitAccepted waits until an agent has taken the eval job of run id.
func (b *burst) waitAccepted(id string, limit time.Duration) {
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		for _, j := range b.h.buildJobs(id) {
			if j.Key == "eval" && !j.Accepted.IsZero() {
				return
			}
		}
	}
	b.h.t.Fatalf("build %s: no agent took its eval job within %s", id, limit)
}

func (b *burst) done(id string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.results[id]
	return ok
}

// killed is the lease holder the test killed.
type killed struct {
	Container string // its container's name
	Agent     string
	At        time.Time
}

// killLeaseHolder waits until a job of queue runs its container, that
// is, holds its lease (the sandbox takes it before docker run and lets
// it go after), and SIGKILLs its agent and every process of the job (the
// sandbox included), as the OOM killer or a crash of the node's agent
// service would. The container, which outlives its sandbox, is then
// removed, as the next job of that agent would remove it
// (docs/isolation.md): it is no job's any more, and the overlap check
// counts it as ending at the kill.
func (b *burst) killLeaseHolder(queue string, limit time.Duration) killed {
	h := b.h
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		cs, err := readContainers(h.containerLog())
		must(h.t, err)
		for _, c := range cs {
			j, ok := jobOf(h.srv, c.Name)
			if !ok || j.Queue != queue || !c.End.IsZero() {
				continue
			}
			agent := h.agentNamed(j.Agent)
			agent.Kill()
			for _, p := range jobProcesses(j.ID) {
				var pid int
				if _, err := fmt.Sscan(p, &pid); err == nil {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			k := killed{Container: c.Name, Agent: j.Agent, At: time.Now()}
			_ = exec.Command("docker", "rm", "--force", c.Name).Run()
			h.t.Logf("killed agent %s and job %s while its container %s ran on %v", j.Agent, j.ID, c.Name, c.GPUs)
			return k
		}
		time.Sleep(100 * time.Millisecond)
	}
	h.t.Fatalf("no container of queue %s ran within %s", queue, limit)
	return killed{}
}

// jobOf is the job whose container is named name (sandbox.ContainerName).
func jobOf(srv *fakebuildkite.Server, name string) (fakebuildkite.JobInfo, bool) {
	id := strings.TrimPrefix(name, "kbgen-")
	for _, j := range srv.AllJobs() {
		if j.ID == id {
			return j, true
		}
	}
	return fakebuildkite.JobInfo{}, false
}

func (h *harness) agentNamed(name string) *Agent {
	for _, a := range h.gpus {
		if a.Name == name {
			return a
		}
	}
	h.t.Fatalf("no node agent named %s", name)
	return nil
}

// gpusOf is the GPU set of node agent name, as its placement names it.
func (h *harness) gpusOf(name string) []string {
	for i, a := range h.gpus {
		for _, kv := range h.node[i].Env {
			if v, ok := strings.CutPrefix(kv, contract.EnvGPUUUID+"="); ok && a.Name == name {
				return slices.Sorted(slices.Values(strings.Split(v, ",")))
			}
		}
	}
	return nil
}

// buildJobs are the jobs of the build of run id.
func (h *harness) buildJobs(id string) []fakebuildkite.JobInfo {
	for n := 1; ; n++ {
		env, _, _ := h.srv.CreatedEnv(n)
		if env == nil {
			return nil
		}
		if env[contract.EnvRunID] == id {
			return h.srv.Jobs(n)
		}
	}
}

// checkResults: every build gave a passing FullResult.
func (b *burst) checkResults() {
	t := b.h.t
	for id, r := range b.results {
		var res payload.FullResult
		if r.code != 0 {
			t.Errorf("build %s (%s): submit exit %d\n%s", id, b.queue[id], r.code, tail(r.stderr, 10))
			for _, j := range b.h.buildJobs(id) {
				t.Logf("build %s: job %s on %s: %s exit %v\n%s", id, j.Key, j.Agent, j.State, j.Exit, tail(j.Log, 15))
			}
		} else if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || !res.Success || res.Runs["test"].Run == nil || !res.Runs["test"].Run.Passed {
			t.Errorf("build %s (%s): not a passing FullResult (%v):\n%s", id, b.queue[id], err, r.stdout)
		}
	}
	if len(b.results) != len(b.submitted) {
		t.Errorf("%d builds submitted, %d results", len(b.submitted), len(b.results))
	}
}

// checkGPUs: every container got its agent's GPUs, as many as its queue
// gives, and no two held one GPU at once.
func (b *burst) checkGPUs(cs []*container, jobs map[string]fakebuildkite.JobInfo, k killed) {
	t := b.h.t
	want := map[string]int{l4Queue: 1, l4x2Queue: 2, l4x4Queue: 4}
	for _, c := range cs {
		j := jobs[strings.TrimPrefix(c.Name, "kbgen-")]
		if g := b.h.gpusOf(j.Agent); len(c.GPUs) != want[j.Queue] || !slices.Equal(c.GPUs, g) {
			t.Errorf("container %s (queue %s, agent %s) got GPUs %v; want its agent's %d: %v", c.Name, j.Queue, j.Agent, c.GPUs, want[j.Queue], g)
		}
		switch {
		case c.Name == k.Container:
			c.End = k.At
		case c.End.IsZero():
			t.Errorf("container %s (agent %s) has no end in the record", c.Name, j.Agent)
			c.End = time.Now()
		}
	}
	if x, y, g := overlapping(cs); x != nil {
		t.Errorf("GPU %s held by two containers at once: %s %s–%s and %s %s–%s", g,
			x.Name, x.Start.Format("15:04:05.000"), x.End.Format("15:04:05.000"), y.Name, y.Start.Format("15:04:05.000"), y.End.Format("15:04:05.000"))
	}
	t.Logf("%d containers, none sharing a GPU at once", len(cs))
}

// checkKill: the killed job was lost and retried, and its GPUs were
// leased again after the kill.
func (b *burst) checkKill(cs []*container, jobs map[string]fakebuildkite.JobInfo, k killed) {
	t := b.h.t
	lost := jobs[strings.TrimPrefix(k.Container, "kbgen-")]
	if lost.Exit == nil || *lost.Exit != -1 || !lost.Retried {
		t.Errorf("killed job %s: exit %v retried %v; want -1 (lost) and retried", lost.ID, lost.Exit, lost.Retried)
	}
	var freed []string
	held := b.h.gpusOf(k.Agent)
	for _, c := range cs {
		if c.Start.After(k.At) && slices.ContainsFunc(c.GPUs, func(g string) bool { return slices.Contains(held, g) }) {
			freed = append(freed, c.Name)
		}
	}
	if len(freed) == 0 {
		t.Errorf("no container ran on %v after the kill: the killed job's lease was not freed", held)
	}
	t.Logf("after the kill, %d containers ran on the killed job's GPUs %v", len(freed), held)
}

// checkWriterPreference: one-GPU builds arrived while the four-GPU job
// waited and ran, and it still got its GPUs within a bound. With writer
// preference it waits for the containers already on its GPUs (and, as
// it claims them one by one, at most one more per GPU), so twice the
// longest container plus a minute for the agent's checkout and hooks
// under load; without it, a stream of one-GPU jobs could hold one of its
// GPUs for as long as they keep coming.
func (b *burst) checkWriterPreference(cs []*container, jobs map[string]fakebuildkite.JobInfo) {
	t := b.h.t
	var four *container
	var longest time.Duration
	for _, c := range cs {
		if jobs[strings.TrimPrefix(c.Name, "kbgen-")].Queue == l4x4Queue && four == nil {
			four = c
		}
		longest = max(longest, c.End.Sub(c.Start))
	}
	if four == nil {
		t.Fatal("no container of the four-GPU queue in the record")
	}
	job := jobs[strings.TrimPrefix(four.Name, "kbgen-")]
	arrived := 0
	for id, at := range b.submitted {
		if b.queue[id] == l4Queue && at.After(job.Accepted) && at.Before(four.End) {
			arrived++
		}
	}
	if arrived == 0 {
		t.Errorf("no one-GPU build arrived while the four-GPU job ran (accepted %s, container ended %s)", job.Accepted.Format("15:04:05.000"), four.End.Format("15:04:05.000"))
	}
	waited, bound := four.Start.Sub(job.Accepted), 2*longest+time.Minute
	if waited > bound {
		t.Errorf("the four-GPU job's container started %s after the agent took the job; want at most %s (twice the longest container, %s, plus a minute)", waited.Round(time.Millisecond), bound.Round(time.Millisecond), longest.Round(time.Millisecond))
	}
	t.Logf("four-GPU job: container started %s after acceptance (bound %s); %d one-GPU builds arrived meanwhile", waited.Round(time.Millisecond), bound.Round(time.Millisecond), arrived)
}
