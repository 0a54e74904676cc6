package servedeploy

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/internal/testcert"
	"github.com/gpu-mode/kbgen/payload"
)

// proxyTimeout is the nginx proxy_read_timeout the test sets (the file
// says 60s): a stream quiet this long is cut.
const proxyTimeout = 3 * time.Second

// TestNginxStreams runs nginx.conf with a real nginx (TLS, the test's
// certificate) in front of a real kbgen serve, its proxy_read_timeout
// cut to 3s. With a 1s heartbeat a run's event stream stays open well
// past the timeout while the run is quiet, each line arriving as it is
// sent (unbuffered); with the heartbeat over the timeout (20s, the most
// kbgen serve allows) nginx cuts the stream: the heartbeat is what keeps
// it. The control: with the file's proxy_buffering off undone, the same
// measure sees the lines held back.
func TestNginxStreams(t *testing.T) {
	nginx := need(t, "nginx", "apt-get install nginx")
	for _, tc := range []struct {
		name      string
		heartbeat time.Duration
		change    []string // replacements in nginx.conf
		want      string   // "open", "cut" or "buffered"
	}{
		{"heartbeat under the proxy's timeout", time.Second, nil, "open"},
		{"heartbeat over the proxy's timeout", 20 * time.Second, nil, "cut"},
		// The control: the file's proxy_buffering off (and the service's
		// X-Accel-Buffering: no) undone, the test sees the lines held back.
		{"buffered", time.Second, []string{"proxy_buffering off;", "proxy_buffering on; proxy_ignore_headers X-Accel-Buffering;"}, "buffered"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fake := newFake(t, quiet)
			servePort := freePort(t)
			startServe(t, buildkiteEnv(fake), "serve", "--listen", fmt.Sprintf("127.0.0.1:%d", servePort), "--heartbeat", tc.heartbeat.String(), "--poll-interval", "100ms")
			url, hc := startNginx(t, nginx, servePort, tc.change...)
			post(t, hc, url, "quiet-run")
			lines, gaps, err := follow(t, hc, url+"/v1/runs/quiet-run/events", 3*proxyTimeout)
			beats := strings.Count(strings.Join(lines, "\n"), `{"event":"heartbeat"}`)
			if tc.want == "buffered" {
				if beats >= 3 {
					t.Fatalf("%d heartbeats through a buffering nginx in %s: the test cannot tell buffered from not", beats, 3*proxyTimeout)
				}
				t.Logf("a buffering nginx held the stream back: %d lines, %d heartbeats in %s", len(lines), beats, 3*proxyTimeout)
				return
			}
			if len(lines) == 0 || !strings.Contains(lines[0], `"event":"created"`) {
				t.Fatalf("lines %q, want the created event first", lines)
			}
			if tc.want == "cut" {
				var c *cut
				if !errors.As(err, &c) || c.quiet < proxyTimeout-time.Second || c.quiet > proxyTimeout+2*time.Second {
					t.Fatalf("the stream, quiet past nginx's %s read timeout, ended so: %v; the test cannot tell", proxyTimeout, err)
				}
				t.Logf("without a heartbeat in time, nginx cut the stream: %v; its lines:\n%s", err, strings.Join(lines, "\n"))
				return
			}
			if err != nil {
				t.Fatalf("the stream broke after %d lines: %v", len(lines), err)
			}
			if gaps > tc.heartbeat+time.Second {
				t.Errorf("%s between two lines through nginx, with a heartbeat every %s: buffered", gaps, tc.heartbeat)
			}
			if beats < 5 {
				t.Errorf("%d heartbeats in %s", beats, 3*proxyTimeout)
			}
		})
	}
}

// startNginx runs nginx.conf in front of kbgen serve at servePort, with
// TLS on a fresh certificate, and returns its URL and a client that
// trusts it.
func startNginx(t *testing.T, nginx string, servePort int, change ...string) (string, *http.Client) {
	t.Helper()
	dir := t.TempDir()
	pair := testcert.Write(t, dir, "serve", "kbgen-serve")
	port := freePort(t)
	pairs := append([]string{
		"server 127.0.0.1:8077;", fmt.Sprintf("server 127.0.0.1:%d;", servePort),
		"listen 8443 ssl;", fmt.Sprintf("listen 127.0.0.1:%d ssl;", port),
		"/etc/kbgen/tls/serve.crt", pair.Cert,
		"/etc/kbgen/tls/serve.key", pair.Key,
		"proxy_read_timeout 60s;", fmt.Sprintf("proxy_read_timeout %ds;", int(proxyTimeout.Seconds())),
	}, change...)
	site := render(t, "nginx.conf", pairs...)
	writeFile(t, filepath.Join(dir, "site.conf"), site, 0o644)
	user := ""
	if os.Geteuid() == 0 {
		user = "user root root;" // the workers read the test's private directory
	}
	main := fmt.Sprintf(`%s
daemon off;
pid %[2]s/nginx.pid;
error_log %[2]s/error.log info;
events { worker_connections 64; }
http {
    access_log off;
    client_body_temp_path %[2]s/body;
    proxy_temp_path %[2]s/proxy;
    fastcgi_temp_path %[2]s/fastcgi;
    uwsgi_temp_path %[2]s/uwsgi;
    scgi_temp_path %[2]s/scgi;
    include %[2]s/site.conf;
}
`, user, dir)
	conf := filepath.Join(dir, "nginx.conf")
	writeFile(t, conf, main, 0o644)
	if out, err := runOutput(nginx, "-t", "-p", dir, "-e", filepath.Join(dir, "error.log"), "-c", conf); err != nil {
		t.Fatalf("nginx -t: %v\n%s", err, out)
	}
	cmd := exec.Command(nginx, "-p", dir, "-e", filepath.Join(dir, "error.log"), "-c", conf)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			t.Fatalf("nginx does not listen on %s:\n%s", addr, log)
		}
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pair.Pool, ServerName: "kbgen-serve"}}}
	return "https://" + addr, hc
}

// post submits a run through the proxy, with the bearer token.
func post(t *testing.T, hc *http.Client, url, id string) {
	t.Helper()
	body := fmt.Sprintf(`{"run_id": %q, "queue": "nvidia-h100", "payload": %q}`, id, testPayload(t))
	req, _ := http.NewRequest("POST", url+"/v1/runs", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+serverToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct{ Error string }
	_ = json.NewDecoder(resp.Body).Decode(&st)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST through nginx: %s %s", resp.Status, st.Error)
	}
}

// follow reads the event stream for up to d; it returns the lines read
// (none when not even the answer's header came through: a proxy that
// buffers it), the longest wait between two of them after the first, and
// why the stream ended before d (nil: it was open all along).
func follow(t *testing.T, hc *http.Client, url string, d time.Duration) (lines []string, longest time.Duration, err error) {
	t.Helper()
	// The context, not a Close of the body, ends a read that waits: a
	// proxy that holds the lines back sends nothing to wake it.
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+serverToken)
	resp, err := hc.Do(req)
	switch {
	case err != nil && ctx.Err() != nil:
		return nil, 0, nil // open all along, and not even its header came through
	case err != nil:
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("events through nginx: %s", resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	last := time.Time{}
	for sc.Scan() {
		if !last.IsZero() {
			longest = max(longest, time.Since(last))
		}
		last = time.Now()
		lines = append(lines, sc.Text())
	}
	if ctx.Err() == nil {
		return lines, longest, &cut{quiet: time.Since(last), err: sc.Err()}
	}
	return lines, longest, nil
}

// cut is a stream that ended early, after quiet without a line.
type cut struct {
	quiet time.Duration
	err   error
}

func (c *cut) Error() string {
	return fmt.Sprintf("ended %s after its last line: %v", c.quiet.Round(100*time.Millisecond), c.err)
}

// testPayload is a small test job as Kernelbot sends it.
func testPayload(t *testing.T) string {
	t.Helper()
	enc, err := payload.Encode([]byte(`{"lang": "py", "mode": "test", "sources": {"eval.py": "print(1)", "submission.py": "x = 1"}, "main": "eval.py", "tests": [{"size": 128, "seed": 5236}], "benchmarks": [], "seed": null, "ranking_by": "last", "test_timeout": 60, "benchmark_timeout": 60, "ranked_timeout": 60}`))
	if err != nil {
		t.Fatal(err)
	}
	return enc
}
