package sandbox

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// oomQueryTimeout bounds the one `docker events` query after a 137.
const oomQueryTimeout = 10 * time.Second

// ending is how a run ended as the host saw it, for the words on an exit
// by signal: what the sandbox sent the step, and, for a container killed
// by SIGKILL, whether the engine OOM-killed it.
type ending struct {
	// Stopped is the signal the sandbox forwarded (docker stop); nil
	// when it forwarded none. Killed: a second one came (docker kill).
	Stopped os.Signal
	Killed  bool
	// Engine: a container engine ran the step and was asked about an OOM
	// kill (the process launcher has none to ask).
	Engine bool
	// OOM: the engine reports the container OOM-killed; OOMErr: the
	// question could not be answered.
	OOM    bool
	OOMErr error
}

// describe is what an exit code by signal means, in the sandbox's words
// ("" for an exit that is not by a signal). A 137 is out of memory only
// when the engine says so: SIGKILL also comes from docker kill, from a
// host process (a reaper, an operator) or from the container's own.
func (e ending) describe(code int) string {
	switch {
	case code == 137:
		return " (SIGKILL" + e.killedBy() + ")"
	case code > 128 && code < 160 && e.Stopped != nil:
		return fmt.Sprintf(" (signal %d, after the sandbox stopped the container on %s: the job was cancelled)", code-128, signalName(e.Stopped))
	case code > 128 && code < 160:
		return fmt.Sprintf(" (signal %d)", code-128)
	}
	return ""
}

// killedBy says where a SIGKILL came from, as far as the host knows.
func (e ending) killedBy() string {
	switch {
	case e.OOM:
		return ": out of memory, the engine OOM-killed the container (docker's State.OOMKilled)"
	case e.Killed:
		return fmt.Sprintf(": the sandbox killed the container on a second %s; not out of memory", signalName(e.Stopped))
	case e.Stopped != nil:
		return fmt.Sprintf(": the sandbox stopped the container on %s (the job was cancelled) and it did not exit within the grace period; not out of memory", signalName(e.Stopped))
	case !e.Engine:
		return ": killed from the host or out of memory; no container engine here to say which"
	case e.OOMErr != nil:
		return fmt.Sprintf(": whether out of memory is unknown (%v)", e.OOMErr)
	}
	return ", not out of memory (the engine reports no OOM kill): killed from the host (docker kill, a host process) or from inside the container"
}

// oomKilled asks the engine whether it OOM-killed the container named
// name since it started: its "oom" event, the one moby's ProcessEvent
// logs where it sets State.OOMKilled (daemon/monitor.go). The container
// ran with --rm and is gone, so State cannot be inspected; the daemon
// keeps its recent events, and --until makes the query return at once.
func (l *Launcher) oomKilled(ctx context.Context, docker, name string, since time.Time) (bool, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), oomQueryTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, docker, "events", "--since", unixTime(since), "--until", unixTime(time.Now()),
		"--filter", "container="+name, "--filter", "event=oom", "--format", "{{.Action}}")
	cmd.Env = l.Env
	out, err := cmd.Output()
	if err != nil {
		return false, fmt.Errorf("docker events: %v", err)
	}
	return oomEvent(out), nil
}

// oomEvent reports whether docker events' output, one {{.Action}} a line,
// holds an "oom" line: the whole line, not a word within one.
func oomEvent(out []byte) bool {
	return slices.Contains(strings.Split(strings.TrimSpace(string(out)), "\n"), "oom")
}

// unixTime is t as docker's --since and --until take it: seconds.nanoseconds.
func unixTime(t time.Time) string {
	return strconv.FormatInt(t.Unix(), 10) + "." + fmt.Sprintf("%09d", t.Nanosecond())
}

// signalName is a forwarded signal as an operator writes it (SIGTERM, not
// Go's "terminated").
func signalName(sig os.Signal) string {
	names := map[syscall.Signal]string{syscall.SIGTERM: "SIGTERM", syscall.SIGINT: "SIGINT", syscall.SIGHUP: "SIGHUP", syscall.SIGQUIT: "SIGQUIT"}
	if s, ok := sig.(syscall.Signal); ok && names[s] != "" {
		return names[s]
	}
	return fmt.Sprint(sig)
}
