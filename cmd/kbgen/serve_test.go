package main

import (
	"bufio"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/internal/fakebuildkite"
	"github.com/gpu-mode/kbgen/internal/kbgenbin"
	"github.com/gpu-mode/kbgen/internal/syncbuf"
	"github.com/gpu-mode/kbgen/internal/testcert"
)

// serveProc is a real `kbgen serve` process.
type serveProc struct {
	cmd    *exec.Cmd
	stderr *syncbuf.Buffer
	url    string
}

func startServe(t *testing.T, bin string, fake *fakebuildkite.Server, env map[string]string, args ...string) *serveProc {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"serve", "--poll-interval", "100ms", "--debug"}, args...)...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "BUILDKITE_API_TOKEN=" + fake.Token, "BUILDKITE_ORG=" + fake.Org,
		"BUILDKITE_PIPELINE=" + fake.Pipeline, "BUILDKITE_API_URL=" + fake.URL()}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &serveProc{cmd: cmd, stderr: &syncbuf.Buffer{}}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			line := sc.Text()
			p.stderr.Write([]byte(line + "\n"))
			if _, rest, ok := strings.Cut(line, "listening on "); ok {
				ready <- strings.Fields(rest)[0]
			}
		}
	}()
	select {
	case p.url = <-ready:
	case <-time.After(20 * time.Second):
		t.Fatalf("kbgen serve did not start:\n%s", p.stderr.String())
	}
	return p
}

func serveJob(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../golden/cli/fixtures/job.json")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestServeSurvivesSIGKILL: kbgen submit --server rides out a SIGKILL and
// restart of the service mid-run and prints the result; one build only; the
// Buildkite token is in no log line; the socket is 0600.
func TestServeSurvivesSIGKILL(t *testing.T) {
	bin := kbgenbin.Path(t)
	fake := fakebuildkite.New(nil)
	defer fake.Close()
	fake.SetScript(fakebuildkite.Script{BootStart: 100 * time.Millisecond, Uploaded: 300 * time.Millisecond, EvalStart: 400 * time.Millisecond, Finish: 4 * time.Second})
	sock := filepath.Join(t.TempDir(), "serve.sock")
	first := startServe(t, bin, fake, nil, "--listen", "unix:"+sock)
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket %s: %v %v, want mode 0600", sock, fi.Mode(), err)
	}
	var second *serveProc
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		deadline := time.Now().Add(10 * time.Second)
		for fake.CountRequests("POST", "/builds") == 0 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		time.Sleep(300 * time.Millisecond)
		_ = first.cmd.Process.Signal(syscall.SIGKILL)
		_ = first.cmd.Wait()
		time.Sleep(500 * time.Millisecond) // the client sees the service gone
		second = startServe(t, bin, fake, nil, "--listen", "unix:"+sock)
	}()
	res := runKbgen(t, map[string]string{"KBGEN_SERVER": "unix:" + sock}, serveJob(t),
		"submit", "--queue", "h100", "-f", "-", "--run-id", "killed-1", "--progress=json")
	wg.Wait()
	if res.code != 0 {
		t.Fatalf("exit %d\nstdout %s\nstderr %s\nserve 1:\n%s\nserve 2:\n%s", res.code, res.stdout, res.stderr, first.stderr.String(), second.stderr.String())
	}
	var fr struct{ Success bool }
	if strings.Count(res.stdout, "\n") != 1 || json.Unmarshal([]byte(res.stdout), &fr) != nil || !fr.Success {
		t.Fatalf("stdout is not one FullResult line: %q", res.stdout)
	}
	if !strings.Contains(res.stderr, `"event":"created"`) || !strings.Contains(res.stderr, `"event":"done"`) {
		t.Errorf("progress lacks created/done:\n%s", res.stderr)
	}
	if n := fake.CountRequests("POST", "/builds"); n != 1 {
		t.Fatalf("%d builds created for one run across a SIGKILL", n)
	}
	if !strings.Contains(second.stderr.String(), "resumed 1 runs") {
		t.Errorf("the restarted service did not say it resumed the run:\n%s", second.stderr.String())
	}
	for i, p := range []*serveProc{first, second} {
		if strings.Contains(p.stderr.String(), fake.Token) {
			t.Errorf("serve %d logged the Buildkite token", i+1)
		}
		if !strings.Contains(p.stderr.String(), "debug: api GET") {
			t.Errorf("serve %d logged no request: the token check proves nothing", i+1)
		}
	}
}

// TestServeTCP: a bearer token is required on TCP; a wrong one is exit 2;
// the right one gives the result; a non-loopback address is refused.
func TestServeTCP(t *testing.T) {
	fake := fakebuildkite.New(nil)
	defer fake.Close()
	fake.SetScript(fakebuildkite.Script{BootStart: 50 * time.Millisecond, Uploaded: 100 * time.Millisecond, EvalStart: 150 * time.Millisecond, Finish: 500 * time.Millisecond})
	env := map[string]string{"BUILDKITE_API_TOKEN": fake.Token, "BUILDKITE_ORG": fake.Org, "BUILDKITE_PIPELINE": fake.Pipeline, "BUILDKITE_API_URL": fake.URL()}
	if res := runKbgen(t, env, "", "serve", "--listen", "127.0.0.1:0"); res.code != 2 || !strings.Contains(res.stderr, "KBGEN_SERVER_TOKEN") {
		t.Fatalf("serve on TCP without a token: exit %d, %s", res.code, res.stderr)
	}
	env["KBGEN_SERVER_TOKEN"] = "tok"
	if res := runKbgen(t, env, "", "serve", "--listen", "0.0.0.0:0"); res.code != 2 || !strings.Contains(res.stderr, "loopback") {
		t.Fatalf("serve on 0.0.0.0: exit %d, %s", res.code, res.stderr)
	}
	bin := kbgenbin.Path(t)
	p := startServe(t, bin, fake, map[string]string{"KBGEN_SERVER_TOKEN": "right-token"}, "--listen", "127.0.0.1:0")
	bad := runKbgen(t, map[string]string{"KBGEN_SERVER": p.url, "KBGEN_SERVER_TOKEN": "wrong"}, serveJob(t), "submit", "--queue", "h100", "-f", "-")
	if bad.code != 2 || bad.stdout != "" {
		t.Fatalf("wrong server token: exit %d, stdout %q, stderr %s", bad.code, bad.stdout, bad.stderr)
	}
	good := runKbgen(t, map[string]string{"KBGEN_SERVER_TOKEN": "right-token"}, serveJob(t), "submit", "--server", p.url, "--queue", "h100", "-f", "-", "-q")
	if good.code != 0 || !strings.Contains(good.stdout, `"success":true`) {
		t.Fatalf("submit --server: exit %d, stdout %q, stderr %s", good.code, good.stdout, good.stderr)
	}
}

// TestServeRefusesAtOnce: what kbgen serve cannot honour is exit 2 before
// it asks Buildkite anything: a budget over Buildkite's limit (issue 27:
// --api-budget 500 was accepted), a heartbeat a proxy would cut, a port in
// use (issue 27: reported only after the startup scan).
func TestServeRefusesAtOnce(t *testing.T) {
	fake := fakebuildkite.New(nil)
	defer fake.Close()
	env := map[string]string{"BUILDKITE_API_TOKEN": fake.Token, "BUILDKITE_ORG": fake.Org, "BUILDKITE_PIPELINE": fake.Pipeline,
		"BUILDKITE_API_URL": fake.URL(), "KBGEN_SERVER_TOKEN": "tok"}
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"a budget over the organization's limit", []string{"--api-budget", "500"}, "--api-budget 500 is outside 1..200"},
		{"a budget over a user's limit", []string{"--user-budget", "80"}, "--user-budget 80 is outside 1..50"},
		{"a heartbeat a proxy would cut", []string{"--heartbeat", "45s"}, "heartbeat 45s is outside"},
		{"no heartbeat", []string{"--heartbeat", "0s"}, "--heartbeat 0s: the interval must be over 0"},
		{"a port in use", []string{"--listen", taken.Addr().String()}, "address already in use"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"serve", "--listen", "127.0.0.1:0"}, tc.args...)
			res := runKbgen(t, env, "", args...)
			if res.code != 2 || !strings.Contains(res.stderr, tc.want) {
				t.Fatalf("exit %d, stderr %s; want exit 2 saying %q", res.code, res.stderr, tc.want)
			}
		})
	}
	if n := fake.CountRequests("GET", "/builds"); n != 0 {
		t.Errorf("%d build list requests from services that should not have started", n)
	}
}

// TestHealthProbe: kbgen health is the probe of the serve image (no curl
// in it): exit 0 and the health JSON from a running service, 4 from none,
// 2 for a URL it cannot use.
func TestHealthProbe(t *testing.T) {
	fake := fakebuildkite.New(nil)
	defer fake.Close()
	p := startServe(t, kbgenbin.Path(t), fake, map[string]string{"KBGEN_SERVER_TOKEN": "tok"}, "--listen", "127.0.0.1:0")
	ok := runKbgen(t, map[string]string{}, "", "health", p.url)
	if ok.code != 0 || !strings.Contains(ok.stdout, `"ok":true`) {
		t.Fatalf("health of a running service: exit %d, stdout %q, stderr %s", ok.code, ok.stdout, ok.stderr)
	}
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + taken.Addr().String()
	taken.Close()
	if res := runKbgen(t, map[string]string{}, "", "health", "--timeout", "2s", closed); res.code != 4 || !strings.Contains(res.stderr, "kbgen serve: GET /") {
		t.Fatalf("health of nothing: exit %d, stderr %s", res.code, res.stderr)
	}
	if res := runKbgen(t, map[string]string{}, "", "health", "ftp://x"); res.code != 2 {
		t.Fatalf("health of ftp://x: exit %d, stderr %s", res.code, res.stderr)
	}
}

// TestServeTLS: with --tls-cert and --tls-key kbgen serve listens on every
// interface and answers HTTPS only: kbgen health and kbgen submit --server
// reach it with the certificate trusted (SSL_CERT_FILE, as Go reads it),
// not without, and plain HTTP gets no answer.
func TestServeTLS(t *testing.T) {
	fake := fakebuildkite.New(nil)
	defer fake.Close()
	fake.SetScript(fakebuildkite.Script{BootStart: 50 * time.Millisecond, Uploaded: 100 * time.Millisecond, EvalStart: 150 * time.Millisecond, Finish: 500 * time.Millisecond})
	bin := kbgenbin.Path(t)
	pair := testcert.Write(t, t.TempDir(), "serve", "127.0.0.1")
	p := startServe(t, bin, fake, map[string]string{"KBGEN_SERVER_TOKEN": "tls-token"},
		"--listen", "0.0.0.0:0", "--tls-cert", pair.Cert, "--tls-key", pair.Key)
	_, port, err := net.SplitHostPort(strings.TrimPrefix(p.url, "https://"))
	if err != nil || !strings.HasPrefix(p.url, "https://") {
		t.Fatalf("serve says it listens on %q (%v), want https://…", p.url, err)
	}
	url := "https://127.0.0.1:" + port
	trusted := []string{"PATH=" + os.Getenv("PATH"), "SSL_CERT_FILE=" + pair.Cert, "KBGEN_SERVER_TOKEN=tls-token"}
	for _, tc := range []struct {
		name     string
		env      []string
		args     []string
		stdin    string
		wantCode int
		want     string
	}{
		{"health, certificate trusted", trusted, []string{"health", url}, "", 0, `"ok":true`},
		{"health, certificate unknown", []string{"PATH=" + os.Getenv("PATH")}, []string{"health", url}, "", 4, "certificate"},
		{"health over plain HTTP", trusted, []string{"health", "--timeout", "3s", "http://127.0.0.1:" + port}, "", 4, "kbgen serve: GET /"},
		{"submit --server", trusted, []string{"submit", "--server", url, "--queue", "h100", "-f", "-", "-q"}, serveJob(t), 0, `"success":true`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(bin, tc.args...)
			cmd.Env, cmd.Stdin = tc.env, strings.NewReader(tc.stdin)
			out, _ := cmd.CombinedOutput()
			if code := cmd.ProcessState.ExitCode(); code != tc.wantCode || !strings.Contains(string(out), tc.want) {
				t.Fatalf("exit %d, output %s; want exit %d with %q", code, out, tc.wantCode, tc.want)
			}
		})
	}
}
