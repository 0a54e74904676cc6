package runner

import (
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// prSetChildSubreaper is PR_SET_CHILD_SUBREAPER from <linux/prctl.h>.
const prSetChildSubreaper = 36

var subreaperOnce sync.Once

// becomeSubreaper makes orphaned descendants (a double fork, a setsid
// daemon) re-parent to this process instead of init, so they stay
// findable and killable, and reaps them as they exit (startReaper). It is
// process-wide and idempotent.
func becomeSubreaper() {
	subreaperOnce.Do(func() {
		_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0)
		startReaper()
	})
}

// startReaper waits, on every SIGCHLD, for the adopted orphans that have
// exited. In the sandbox `kbgen run --sealed` is the container's PID 1
// (there is no tini), so nobody else would: a zombie holds its pid
// against --pids-limit until the harness ends and the sweep reaps it.
func startReaper() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGCHLD)
	go func() {
		for range ch {
			reapExited()
		}
	}()
}

// reapExited waits (without blocking) for each adopted orphan: a child
// os/exec does not manage and outside this process's own group. The
// children kbgen starts itself without startManaged (system info, noise
// probes) stay in its group, and os/exec must be the one to wait for
// them. All under the managed lock: a pid it lists cannot be reaped and
// reused by a new managed child before it is waited for.
func reapExited() {
	managed.Lock()
	defer managed.Unlock()
	pids, ok := strayChildrenLocked()
	if !ok {
		return // no /proc/.../children: the sweep after the harness reaps them
	}
	own := syscall.Getpgrp()
	for _, pid := range pids {
		if _, pgrp, ok := procStat(pid); !ok || pgrp == own {
			continue
		}
		var ws syscall.WaitStatus
		_, _ = syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
	}
}

// managed is the set of child pids started through startManaged: os/exec
// waits on those itself, so a sweep must neither kill them (unless asked)
// nor reap them. Everything else that is our child is an orphan we adopted.
var managed = struct {
	sync.Mutex
	pids map[int]bool
}{pids: map[int]bool{}}

// startManaged starts cmd and records its pid under the same lock sweeps
// take, so a sweep never mistakes a just-started child for an orphan.
func startManaged(cmd *exec.Cmd) error {
	managed.Lock()
	defer managed.Unlock()
	if err := cmd.Start(); err != nil {
		return err
	}
	managed.pids[cmd.Process.Pid] = true
	return nil
}

// forgetManaged drops pid once os/exec has reaped it.
func forgetManaged(pid int) {
	managed.Lock()
	delete(managed.pids, pid)
	managed.Unlock()
}

// managedChildren starts processes that live beside the harnesses (the
// kbgen-nvml helper, nvmlhelper.Supervisor) as managed children: no sweep
// kills or reaps them, and their pid is forgotten once os/exec reaped it.
type managedChildren struct{}

func (managedChildren) Start(cmd *exec.Cmd) error { return startManaged(cmd) }
func (managedChildren) Reaped(pid int)            { forgetManaged(pid) }

// procTable maps pid → ppid for every process in /proc.
func procTable() map[int]int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	table := make(map[int]int, len(ents))
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// The command name in parentheses may hold spaces and ')': the
		// fields after the last ')' are "state ppid ...".
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 {
			continue
		}
		if f[0] == "Z" {
			// A zombie holds no fds and runs nothing; it only needs reaping.
			table[pid] = -1
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		table[pid] = ppid
	}
	return table
}

// descendants returns the live processes below root in table (root
// excluded), skipping the subtrees of the pids in skip.
func descendants(table map[int]int, root int, skip map[int]bool) []int {
	children := map[int][]int{}
	for pid, ppid := range table {
		children[ppid] = append(children[ppid], pid)
	}
	var out []int
	stack := []int{root}
	for len(stack) > 0 {
		p := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, c := range children[p] {
			if skip[c] {
				continue
			}
			out = append(out, c)
			stack = append(stack, c)
		}
	}
	return out
}

// strayChildren lists this process's children that os/exec does not
// manage: after a harness exits, every process it left behind either is
// one of these (re-parented to the subreaper) or descends from one. It
// reads /proc/self/task/*/children, which is far cheaper than a /proc
// scan, and reports ok=false when the kernel does not provide it.
func strayChildren() (pids []int, ok bool) {
	managed.Lock()
	defer managed.Unlock()
	return strayChildrenLocked()
}

// strayChildrenLocked is strayChildren with the managed lock held.
func strayChildrenLocked() (pids []int, ok bool) {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return nil, false
	}
	for _, t := range tasks {
		b, err := os.ReadFile("/proc/self/task/" + t.Name() + "/children")
		if err != nil {
			return nil, false
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && !managed.pids[pid] {
				pids = append(pids, pid)
			}
		}
	}
	return pids, true
}

// sweep kills what a harness that exited left behind: nothing to do in
// the common case, found without scanning /proc.
func sweep(pgid int) {
	if stray, ok := strayChildren(); ok && len(stray) == 0 {
		// Members of the harness's group are below a stray child, so
		// none can be alive; the group kill is only a safety net.
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		return
	}
	killTree(pgid, pgid)
}

// killTree SIGKILLs the process group pgid (when > 0), then every
// descendant of this process that is not another managed child (or below
// one), except keep, and reaps the adopted orphans among them. It repeats
// until nothing is left, so a forker cannot outrun it, within a bounded
// number of rounds. root is the harness pid: its subtree is killed even
// though it is managed.
func killTree(pgid, root int) {
	if pgid > 0 {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
	self := os.Getpid()
	deadline := time.Now().Add(10 * time.Second)
	for round := 0; time.Now().Before(deadline); round++ {
		managed.Lock()
		skip := make(map[int]bool, len(managed.pids))
		for p := range managed.pids {
			if p != root {
				skip[p] = true
			}
		}
		table := procTable()
		victims := descendants(table, self, skip)
		managed.Unlock()
		// Stop them all first so none can fork while the others die.
		for _, p := range victims {
			_ = syscall.Kill(p, syscall.SIGSTOP)
		}
		for _, p := range victims {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		reaped := reapOrphans(root)
		if len(victims) == 0 && !reaped {
			return
		}
		if round > 0 {
			time.Sleep(time.Duration(min(round, 20)) * time.Millisecond)
		}
	}
}

// reapOrphans waits for every zombie child of this process that os/exec
// does not own, and reports whether it found any. Only known pids are
// waited on: wait4(-1) would steal exit statuses from os/exec.
func reapOrphans(root int) bool {
	self := os.Getpid()
	table := procTable()
	managed.Lock()
	defer managed.Unlock()
	found := false
	for pid, ppid := range table {
		if managed.pids[pid] || pid == root {
			continue
		}
		if ppid == self || (ppid == -1 && isChildOf(pid, self)) {
			var ws syscall.WaitStatus
			if got, _ := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil); got == pid {
				found = true
			}
		}
	}
	return found
}

// isChildOf reads a zombie's parent from /proc (procTable marks zombies
// with ppid -1 so they are not counted as live).
func isChildOf(pid, parent int) bool {
	ppid, _, ok := procStat(pid)
	return ok && ppid == parent
}

// procStat reads a process's parent and process group from
// /proc/<pid>/stat, zombies included.
func procStat(pid int) (ppid, pgrp int, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, false
	}
	// After the name: state ppid pgrp ...
	f := strings.Fields(s[i+1:])
	if len(f) < 3 {
		return 0, 0, false
	}
	ppid, err1 := strconv.Atoi(f[1])
	pgrp, err2 := strconv.Atoi(f[2])
	return ppid, pgrp, err1 == nil && err2 == nil
}
