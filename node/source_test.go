package node

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/registry"
)

// l40s is the 2×L40S fixture as the node commands' flags name it.
func l40s() Source {
	return Source{Sysfs: "testdata/l40sx2/sys", NvidiaSMI: "testdata/l40sx2/nvidia-smi.csv", ReserveCores: 1, ReserveMemory: "16g"}
}

func TestPlanSource(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		edit     func(*Source)
		wantCode int
		kind     func(error) bool // the cause, where it has a kind
		// wantErr is text only where the message is the contract: it names
		// the flag or file the operator fixes.
		wantErr string
	}{
		{"the fixture", func(*Source) {}, exitcode.OK, nil, ""},
		{"a queue of the registry", func(s *Source) { s.Queue = "nvidia-l40s" }, exitcode.OK, nil, ""},
		{"not a size", func(s *Source) { s.ReserveMemory = "lots" }, exitcode.Usage, nil, `--reserve-memory: "lots" is not a size`},
		{"unreadable nvidia-smi output", func(s *Source) { s.NvidiaSMI = "testdata/none.csv" }, exitcode.Usage, isErr(fs.ErrNotExist), "--nvidia-smi: open testdata/none.csv"},
		{"unreadable topology", func(s *Source) { s.NvidiaTopo = "testdata/none.txt" }, exitcode.Usage, isErr(fs.ErrNotExist), "--nvidia-topo: open testdata/none.txt"},
		{"a queue of another runtime", func(s *Source) { s.Queue = "amd-mi300" }, exitcode.Usage, isA[*QueueMismatchError], ""},
		{"an unknown shape", func(s *Source) { s.Shapes = []string{"no-such-queue"} }, exitcode.Usage, unknownQueue("no-such-queue"), ""},
		{"a registry that does not load", func(s *Source) { s.Vendors = "testdata/none.yaml" }, exitcode.Usage, isErr(fs.ErrNotExist), "none.yaml"},
		// What the machine cannot give is a machine fault (75), never the
		// unexpected error (1) scripts are told to report as a bug.
		{"too few cores: the machine, not the flags", func(s *Source) { s.ReserveCores = 7 }, exitcode.TempFail, isErr(ErrTooFewCores), ""},
		{"too little memory", func(s *Source) { s.ReserveMemory = "2000g" }, exitcode.TempFail, isErr(ErrTooLittleMemory), "lower --reserve-memory"},
		{"no GPUs", func(s *Source) { s.Sysfs, s.NvidiaSMI = t.TempDir(), "testdata/empty.csv" }, exitcode.TempFail, isErr(ErrNoGPUs), ""},
		{"negative reserve", func(s *Source) { s.ReserveCores = -1 }, exitcode.Usage, nil, "--reserve-cores -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := l40s()
			tc.edit(&s)
			p, err := PlanSource(context.Background(), s)
			if got := exitcode.Of(err); got != tc.wantCode {
				t.Fatalf("exit code %d (%v), want %d", got, err, tc.wantCode)
			}
			if tc.kind != nil && !tc.kind(err) {
				t.Errorf("err = %v (%T): not the cause wanted", err, err)
			}
			if err != nil {
				if !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("err = %v, want it to say %q", err, tc.wantErr)
				}
				return
			}
			if len(p.Agents) != 2 || p.Queue != s.Queue {
				t.Errorf("plan %+v: want 2 agents for queue %q", p, s.Queue)
			}
		})
	}
}

// An installed plan wins over the machine: the fixture's flags would
// plan 2 L40S agents, the installed plan has 8 MI300X ones.
func TestLoadOrPlan(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	p, err := LoadOrPlan(context.Background(), root, l40s())
	if err != nil || len(p.Agents) != 2 {
		t.Fatalf("no plan installed: %v, %+v; want the fixture's 2 agents", err, p)
	}
	if _, err := Apply(root, renderFixture(t, "mi300xx8", "amd-mi300", false), false); err != nil {
		t.Fatal(err)
	}
	if p, err = LoadOrPlan(context.Background(), root, l40s()); err != nil || len(p.Agents) != 8 {
		t.Fatalf("plan installed: %v, %+v; want its 8 agents", err, p)
	}
}

// Install into a root twice (the second changes nothing), then as a dry
// run for another machine's plan: the report's verbs, the stale agents and
// the next steps are what the operator reads.
func TestInstallReport(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	req := InstallRequest{Source: l40s(), Inputs: Inputs{Root: root}, Options: InstallOptions{AgentBinary: "/usr/bin/buildkite-agent", User: "buildkite-agent", KbgenPath: "/usr/local/bin/kbgen"}}
	req.Source.Queue = "nvidia-l40s"
	for _, tc := range []struct {
		name       string
		edit       func(*InstallRequest)
		want, omit []string
	}{
		{"first install", func(*InstallRequest) {}, []string{
			"created      -rw-r--r-- /etc/buildkite-agent/kbgen/gpu1/buildkite-agent.cfg",
			"2 agents for queue nvidia-l40s; start them with: systemctl daemon-reload && systemctl enable --now buildkite-agent-gpu@0.service buildkite-agent-gpu@1.service",
			"housekeeping CPUs 0,7-8,15 (cgroup v1): systemctl daemon-reexec, then restart docker, containerd and the agents; kbgen doctor checks it",
			"warning: no agent token given",
		}, []string{"would ", "updated", "stale"}},
		{"again: nothing changes", func(*InstallRequest) {}, []string{"unchanged    -rw-r--r-- /etc/buildkite-agent/kbgen/gpu1/buildkite-agent.cfg"}, []string{"created", "updated"}},
		{"a dry run with an agent left from another plan", func(r *InstallRequest) {
			r.DryRun, r.Source.ReserveCores = true, 3
			if err := os.MkdirAll(filepath.Join(root, ConfigDir, "gpu5"), 0o755); err != nil {
				t.Fatal(err)
			}
		}, []string{
			"would update -rw-r--r-- /etc/buildkite-agent/kbgen/plan.json",
			"stale        /etc/buildkite-agent/kbgen/gpu5: agent gpu5 is not in the plan; systemctl disable --now buildkite-agent-gpu@5.service",
		}, []string{"created      ", "updated      "}},
	} {
		// In turn: each step installs on the last one's root.
		r := req
		tc.edit(&r)
		rep, err := Install(context.Background(), r)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var out, warn strings.Builder
		rep.Write(&out, &warn)
		all := out.String() + warn.String()
		for _, w := range tc.want {
			if !strings.Contains(all, w) {
				t.Errorf("%s: report lacks %q:\n%s", tc.name, w, all)
			}
		}
		for _, o := range tc.omit {
			if strings.Contains(all, o) {
				t.Errorf("%s: report says %q:\n%s", tc.name, o, all)
			}
		}
	}
}

func TestHousekeepingNextStep(t *testing.T) {
	t.Parallel()
	for v, want := range map[int]string{1: "systemctl daemon-reexec", 2: "systemctl daemon-reload"} {
		if got := (&Plan{CgroupVersion: v}).HousekeepingNextStep(); !strings.HasPrefix(got, want+", then restart docker") {
			t.Errorf("cgroup v%d: %q, want %s first", v, got, want)
		}
	}
}

func isErr(target error) func(error) bool {
	return func(err error) bool { return errors.Is(err, target) }
}

func isA[T error](err error) bool { return errors.As(err, new(T)) }

func unknownQueue(queue string) func(error) bool {
	return func(err error) bool {
		uq, ok := errors.AsType[*registry.UnknownQueueError](err)
		return ok && uq.Queue == queue
	}
}
