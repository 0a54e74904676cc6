package runner

import (
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// insideSignals are the signals Go's runtime dies of when the program has
// not asked for them (os/signal's package doc, "Default behavior of
// signals in Go programs"; runtime/sigtab_linux_generic.go): SIGHUP
// exits, SIGQUIT, SIGILL, SIGTRAP, SIGABRT, SIGSTKFLT and SIGSYS dump every
// goroutine and exit 2, and so do SIGBUS, SIGFPE and SIGSEGV when sent
// with kill(2) (a real fault still panics: the runtime tells them apart
// by si_code). SIGTERM and SIGINT are a cancel (cmd/kbgen's signal
// context); SIGKILL from inside the container never reaches PID 1.
var insideSignals = []os.Signal{
	syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGILL, syscall.SIGTRAP, syscall.SIGABRT,
	syscall.SIGBUS, syscall.SIGFPE, syscall.SIGSEGV, syscall.SIGSTKFLT, syscall.SIGSYS,
}

var pid1Once sync.Once

// shieldPID1 keeps the runner alive, when it is the container's PID 1,
// through the signals in insideSignals. The kernel delivers a signal to a
// namespace's init only when init has a handler for it, and Go's runtime
// has one for every signal, so a submission's `kill -HUP 1` (or QUIT,
// ABRT, …) ended the runner before its sealed result: the job failed with
// the sandbox's own result instead of the runner's (issue 25). They are
// caught and logged once each; nothing else happens. A handled signal is
// reset to its default in every child (exec), so the harness sees the
// dispositions Kernelbot's would; an ignored one would be inherited.
func shieldPID1(pid int, log io.Writer) {
	if pid != 1 {
		return
	}
	pid1Once.Do(func() {
		ch := make(chan os.Signal, 16)
		signal.Notify(ch, insideSignals...)
		go func() {
			seen := map[os.Signal]bool{}
			for s := range ch {
				if !seen[s] {
					seen[s] = true
					logf(log, "ignored %v sent to PID 1 (only SIGTERM or SIGINT stop the runner)", s)
				}
			}
		}()
	})
}
