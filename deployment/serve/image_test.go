package servedeploy

import (
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/internal/kbgenbin"
)

// TestImage builds the serve image from the static kbgen with
// build-image.sh (FROM scratch: no pull, no registry), checks what is in
// it and whose it is, and runs it: its own HEALTHCHECK (kbgen health, as
// the image has no curl) says healthy against a local Buildkite, and
// unhealthy where Buildkite cannot be reached.
func TestImage(t *testing.T) {
	need(t, "docker", "apt-get install docker.io")
	if out, err := exec.Command("docker", "info").CombinedOutput(); err != nil {
		t.Skipf("docker cannot run here: %s", out)
	}
	tag := fmt.Sprintf("kbgen-serve-test:%d", time.Now().UnixNano())
	run(t, abs(t, "build-image.sh"), kbgenbin.Path(t), tag)
	t.Cleanup(func() { _ = exec.Command("docker", "rmi", "-f", tag).Run() })
	if user := run(t, "docker", "image", "inspect", "-f", "{{.Config.User}}", tag); user != "65532:65532" {
		t.Errorf("the image runs as %q, want 65532:65532", user)
	}
	fake := newFake(t, quiet)
	t.Run("healthy", func(t *testing.T) {
		name := startContainer(t, tag, buildkiteEnv(fake))
		if got := waitHealth(t, name, "healthy"); !strings.Contains(got, `"ok":true`) {
			t.Errorf("health check output %q", got)
		}
		checkFiles(t, name)
	})
	t.Run("Buildkite unreachable", func(t *testing.T) {
		env := append(buildkiteEnv(fake), fmt.Sprintf("BUILDKITE_API_URL=http://127.0.0.1:%d/", freePort(t)))
		name := startContainer(t, tag, env)
		if got := waitHealth(t, name, "unhealthy"); !strings.Contains(got, "Buildkite unreachable") {
			t.Errorf("health check output %q", got)
		}
	})
}

// startContainer runs the image on the host's network (the local
// Buildkite listens on its loopback), its health checked every 300ms.
func startContainer(t *testing.T, tag string, env []string) string {
	t.Helper()
	port := freePort(t)
	name := fmt.Sprintf("kbgen-serve-test-%d", time.Now().UnixNano())
	args := []string{"run", "-d", "--name", name, "--network", "host",
		"--health-interval", fmtDuration(300 * time.Millisecond), "--health-start-period", fmtDuration(time.Millisecond), "--health-retries", "2",
		"-e", fmt.Sprintf("KBGEN_SERVER=http://127.0.0.1:%d", port)}
	for _, e := range env {
		args = append(args, "-e", e)
	}
	args = append(args, tag, "--listen", fmt.Sprintf("127.0.0.1:%d", port))
	run(t, "docker", args...)
	t.Cleanup(func() { _ = exec.Command("docker", "rm", "-f", name).Run() })
	return name
}

// waitHealth waits for the container's health status and returns the
// last health check's output.
func waitHealth(t *testing.T, name, want string) string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		status := run(t, "docker", "inspect", "-f", "{{.State.Status}} {{.State.Health.Status}}", name)
		if status == "running "+want {
			return run(t, "docker", "inspect", "-f", "{{range .State.Health.Log}}{{.Output}}{{end}}", name)
		}
		if time.Now().After(deadline) || !strings.HasPrefix(status, "running") {
			logs, _ := exec.Command("docker", "logs", name).CombinedOutput()
			t.Fatalf("container %s is %q, want running %s; its log:\n%s", name, status, want, logs)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// checkFiles: the image holds kbgen, the CA bundle and the spill
// directory (the service's), and nothing else beside what docker adds to
// every container.
func checkFiles(t *testing.T, name string) {
	t.Helper()
	out, err := exec.Command("sh", "-c", "docker export "+name+" | tar --numeric-owner -tvf -").CombinedOutput()
	if err != nil {
		t.Fatalf("docker export: %v\n%s", err, out)
	}
	dockerAdds := []string{".dockerenv", "dev/", "proc/", "sys/", "etc/hostname", "etc/hosts", "etc/resolv.conf", "etc/mtab"}
	var files []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		path, owner := f[len(f)-1], f[1]
		if strings.Contains(line, " -> ") {
			path, owner = f[len(f)-3], f[1]
		}
		if slices.ContainsFunc(dockerAdds, func(p string) bool { return path == p || strings.HasPrefix(path, p) && strings.HasSuffix(p, "/") }) {
			continue
		}
		if strings.HasSuffix(path, "/") && path != "var/lib/kbgen-serve/" {
			continue // the directories above the files
		}
		files = append(files, path+" "+owner)
	}
	// A running service has also made its store where the image says
	// (XDG_STATE_HOME): SQLite's file with its write-ahead log, its user's.
	store := "var/lib/kbgen-serve/kbgen/serve-kbgen.db"
	want := []string{"etc/ssl/certs/ca-certificates.crt 0/0", "usr/local/bin/kbgen 0/0", "var/lib/kbgen-serve/ 65532/65532",
		store + " 65532/65532", store + "-shm 65532/65532", store + "-wal 65532/65532"}
	slices.Sort(files)
	slices.Sort(want)
	if !slices.Equal(files, want) {
		t.Errorf("the image holds\n%s\nwant\n%s", strings.Join(files, "\n"), strings.Join(want, "\n"))
	}
}
