// Command servebench measures kbgen serve against the local Buildkite
// stand-in enforcing a new organization's documented REST limits (200 a
// minute for the organization, 50 for each user): many runs at once
// (detection latency, 429s, requests in any minute), or many builds in
// flight (the service's memory and CPU between events). It is a script,
// not a test: docs/performance.md records its numbers with the command.
//
//	go run ./scripts/servebench -runs 40 -build 30s            # polling only
//	go run ./scripts/servebench -runs 40 -build 30s -webhooks  # with webhooks
//	go run ./scripts/servebench -inflight 1000                 # RSS and CPU
//	go run ./scripts/servebench -runs 40 -direct               # baseline: 40 kbgen submit
//	go run ./scripts/servebench -runs 200 -tokens 3            # three users' tokens rotated
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpu-mode/kbgen/client"
	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/fakebuildkite"
	"github.com/gpu-mode/kbgen/payload"
	"github.com/gpu-mode/kbgen/serve"
)

func main() {
	runs := flag.Int("runs", 40, "runs submitted at once")
	build := flag.Duration("build", 30*time.Second, "how long each build takes")
	webhooks := flag.Bool("webhooks", false, "the stand-in sends signed webhooks to the service")
	limit := flag.Int("limit", fakebuildkite.DefaultOrgLimit, "the stand-in's REST limit per minute for the organization")
	userLimit := flag.Int("user-limit", fakebuildkite.DefaultUserLimit, "the stand-in's REST limit per minute for each user (0: none)")
	budget := flag.Int("budget", 100, "kbgen serve --api-budget")
	userBudget := flag.Int("user-budget", serve.DefaultPerUser, "kbgen serve --user-budget")
	tokens := flag.Int("tokens", 1, "tokens of different users kbgen serve rotates (--token-file, one a line)")
	artifacts := flag.Bool("artifacts", false, "builds carry no result meta-data: every result is read from its artifact")
	inflight := flag.Int("inflight", 0, "instead: this many builds in flight, and measure the service's RSS and CPU for -idle")
	idle := flag.Duration("idle", time.Minute, "with -inflight: how long to measure")
	direct := flag.Bool("direct", false, "the baseline: every run polls its own build as kbgen submit does, no service")
	flag.Parse()
	if *direct {
		if err := runDirect(*runs, *build, *limit, *userLimit); err != nil {
			fmt.Fprintln(os.Stderr, "servebench:", err)
			os.Exit(1)
		}
		return
	}
	lim := limits{org: *limit, user: *userLimit, budget: *budget, userBudget: *userBudget, tokens: *tokens}
	if err := run(*runs, *build, *webhooks, lim, *artifacts, *inflight, *idle); err != nil {
		fmt.Fprintln(os.Stderr, "servebench:", err)
		os.Exit(1)
	}
}

const (
	serverToken   = "bench-server-token"
	webhookSecret = "bench-webhook-secret"
)

// limits are the stand-in's limits and the service's budget.
type limits struct {
	org, user          int
	budget, userBudget int
	tokens             int
}

func (l limits) String() string {
	return fmt.Sprintf("stand-in limits %d/min org, %d/min per user; --api-budget %d --user-budget %d, %d token(s)", l.org, l.user, l.budget, l.userBudget, l.tokens)
}

func run(runs int, build time.Duration, webhooks bool, lim limits, artifacts bool, inflight int, idle time.Duration) error {
	fake := fakebuildkite.New(nil)
	defer fake.Close()
	fake.SetScript(fakebuildkite.Script{BootStart: build / 30, Uploaded: build / 10, EvalStart: build / 8, Finish: build, ResultInMetaData: !artifacts})
	for i := range inflight {
		fake.SeedWithMetaData(map[string]string{contract.MetaDataRunID: fmt.Sprintf("seed-%d", i), contract.MetaDataQueue: "nvidia-h100", serve.MetaDataService: "kbgen"},
			fakebuildkite.Script{BootStart: time.Second, Uploaded: 2 * time.Second, EvalStart: 3 * time.Second, Never: true}, time.Minute)
	}
	fake.SetRateLimit(lim.org)
	fake.SetUserRateLimit(lim.user)
	bin, err := buildKbgen()
	if err != nil {
		return err
	}
	defer os.RemoveAll(filepath.Dir(bin))
	tokenFile := filepath.Join(filepath.Dir(bin), "tokens")
	lines := fake.Token + "\n"
	for i := 1; i < lim.tokens; i++ {
		tok := fmt.Sprintf("bkua_bench_%d", i)
		fake.AddToken(tok, fmt.Sprintf("bench-user-%d", i))
		lines += tok + "\n"
	}
	if err := os.WriteFile(tokenFile, []byte(lines), 0o600); err != nil {
		return err
	}
	env := []string{"BUILDKITE_ORG=" + fake.Org, "BUILDKITE_PIPELINE=" + fake.Pipeline,
		"BUILDKITE_API_URL=" + fake.URL(), "KBGEN_SERVER_TOKEN=" + serverToken}
	if webhooks {
		env = append(env, "BUILDKITE_WEBHOOK_SECRET="+webhookSecret)
	}
	cmd, url, err := startServe(bin, env, lim, tokenFile)
	if err != nil {
		return err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if webhooks {
		fake.SetWebhook(fakebuildkite.Webhook{URL: url + "/v1/buildkite/webhook", Secret: webhookSecret})
	}
	if inflight > 0 {
		return measureIdle(fake, cmd.Process.Pid, url, inflight, idle)
	}
	return measureLoad(fake, url, runs, build, webhooks, lim)
}

func buildKbgen() (string, error) {
	dir, err := os.MkdirTemp("", "servebench-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "kbgen")
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/kbgen").CombinedOutput(); err != nil {
		return "", fmt.Errorf("building kbgen (run from the repository root): %v\n%s", err, out)
	}
	return bin, nil
}

func startServe(bin string, env []string, lim limits, tokenFile string) (*exec.Cmd, string, error) {
	cmd := exec.Command(bin, "serve", "--listen", "127.0.0.1:0", "--api-budget", strconv.Itoa(lim.budget), "--user-budget", strconv.Itoa(lim.userBudget), "--token-file", tokenFile)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
	pipe, err := cmd.StderrPipe()
	if err != nil {
		return nil, "", err
	}
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			if _, rest, ok := strings.Cut(sc.Text(), "listening on "); ok {
				ready <- strings.Fields(rest)[0]
				fmt.Fprintln(os.Stderr, sc.Text())
			}
		}
	}()
	select {
	case url := <-ready:
		return cmd, url, nil
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		return nil, "", fmt.Errorf("kbgen serve did not start")
	}
}

func jobPayload() string {
	enc, err := payload.Encode([]byte(`{"lang": "py", "mode": "test", "sources": {"eval.py": "print(1)", "submission.py": "x = 1"}, "main": "eval.py", "tests": [{"size": 128, "seed": 5236}], "benchmarks": [], "seed": null, "ranking_by": "last", "test_timeout": 60, "benchmark_timeout": 60, "ranked_timeout": 60}`))
	if err != nil {
		panic(err)
	}
	return enc
}

type outcome struct {
	build  int
	status string
	doneAt time.Time
	err    error
	budget bool // the run was told "waiting for API budget"
}

func measureLoad(fake *fakebuildkite.Server, url string, runs int, build time.Duration, webhooks bool, lim limits) error {
	rem, err := serve.NewRemote(url, serverToken)
	if err != nil {
		return err
	}
	enc := jobPayload()
	start := time.Now()
	outs := make([]outcome, runs)
	var wg sync.WaitGroup
	for i := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := &outs[i]
			st, err := rem.Run(context.Background(), serve.RunRequest{RunID: fmt.Sprintf("bench-%d", i), Queue: "nvidia-h100", Payload: enc},
				func(e client.Event) {
					if e.Kind == "budget" {
						o.budget = true
					}
				})
			o.doneAt, o.err = time.Now(), err
			if st != nil {
				o.build, o.status = st.Build, st.Status
			}
		}()
	}
	wg.Wait()
	mode := "polling only"
	if webhooks {
		mode = "with webhooks"
	}
	return report(fake, outs, fmt.Sprintf("%d runs at once, %s builds, %s, %s", runs, build, mode, lim), time.Since(start), webhooks)
}

func report(fake *fakebuildkite.Server, outs []outcome, title string, wall time.Duration, webhooks bool) error {
	runs := len(outs)
	var lat []time.Duration
	failed, told := 0, 0
	for _, o := range outs {
		if o.err != nil || o.status != serve.StatusObtained {
			failed++
			fmt.Fprintf(os.Stderr, "run failed: %v %s\n", o.err, o.status)
			continue
		}
		if o.budget {
			told++
		}
		lat = append(lat, o.doneAt.Sub(fake.PassedAt(o.build)))
	}
	slices.Sort(lat)
	fmt.Println(title)
	fmt.Printf("  results: %d/%d obtained in %s (%d told \"waiting for API budget\")\n", len(lat), runs, wall.Round(100*time.Millisecond), told)
	fmt.Printf("  429 answers: %d (org %d, user %d)\n", fake.RateLimited(), fake.RateLimitedIn(fakebuildkite.ScopeOrg), fake.RateLimitedIn(fakebuildkite.ScopeUser))
	if len(lat) > 0 {
		fmt.Printf("  detection latency: median %s, p99 %s, max %s\n", pct(lat, 50), pct(lat, 99), lat[len(lat)-1].Round(time.Millisecond))
	}
	fmt.Printf("  API requests: %d in all, at most %d in any 60 s\n", fake.CountRequests("", "/v2/"), fake.MaxRequestsIn(time.Minute))
	if webhooks {
		ok, bad := fake.WebhooksSent()
		fmt.Printf("  webhooks delivered: %d (failed %d)\n", ok, bad)
	}
	if failed > 0 {
		return fmt.Errorf("%d runs failed", failed)
	}
	return nil
}

func pct(sorted []time.Duration, p int) time.Duration {
	i := (len(sorted)*p + 99) / 100
	return sorted[max(min(i, len(sorted))-1, 0)].Round(time.Millisecond)
}

func measureIdle(fake *fakebuildkite.Server, pid int, url string, n int, idle time.Duration) error {
	var h serve.Health
	deadline := time.Now().Add(2 * time.Minute)
	for h.Open < n {
		if time.Now().After(deadline) {
			return fmt.Errorf("the service resumed %d of %d runs", h.Open, n)
		}
		time.Sleep(500 * time.Millisecond)
		resp, err := http.Get(url + "/")
		if err == nil {
			_ = json.NewDecoder(resp.Body).Decode(&h)
			resp.Body.Close()
		}
	}
	time.Sleep(5 * time.Second) // past the startup scan
	before := fake.CountRequests("", "/v2/")
	cpu0, err := cpuTicks(pid)
	if err != nil {
		return err
	}
	t0 := time.Now()
	time.Sleep(idle)
	cpu1, _ := cpuTicks(pid)
	secs := time.Since(t0).Seconds()
	rss, hwm := rssKiB(pid)
	fmt.Printf("%d runs in flight (resumed from Buildkite meta-data), measured %s\n", n, idle)
	fmt.Printf("  kbgen serve RSS %.1f MiB (peak %.1f MiB)\n", float64(rss)/1024, float64(hwm)/1024)
	fmt.Printf("  CPU %.2f %% of one core\n", 100*float64(cpu1-cpu0)/100/secs)
	fmt.Printf("  API requests in that time: %d (%.1f/min)\n", fake.CountRequests("", "/v2/")-before, float64(fake.CountRequests("", "/v2/")-before)/secs*60)
	fmt.Printf("  429 answers: %d\n", fake.RateLimited())
	return nil
}

// cpuTicks is utime+stime of pid in clock ticks (100 a second on Linux).
func cpuTicks(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return u + s, nil
}

func rssKiB(pid int) (rss, hwm int64) {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 {
			v, _ := strconv.ParseInt(f[1], 10, 64)
			switch f[0] {
			case "VmRSS:":
				rss = v
			case "VmHWM:":
				hwm = v
			}
		}
	}
	return rss, hwm
}

// runDirect is the baseline the service replaces: each run is a
// client.Submit, as one kbgen submit process does, polling its own build.
func runDirect(runs int, build time.Duration, limit, userLimit int) error {
	fake := fakebuildkite.New(nil)
	defer fake.Close()
	fake.SetScript(fakebuildkite.Script{BootStart: build / 30, Uploaded: build / 10, EvalStart: build / 8, Finish: build})
	fake.SetRateLimit(limit)
	fake.SetUserRateLimit(userLimit)
	enc := jobPayload()
	outs := make([]outcome, runs)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := client.New(client.Options{APIURL: fake.URL(), Org: fake.Org, Pipeline: fake.Pipeline, Token: fake.Token})
			if err != nil {
				outs[i].err = err
				return
			}
			out := c.Submit(context.Background(), client.Submission{Queue: "nvidia-h100", RunID: fmt.Sprintf("direct-%d", i), Encoded: enc, Branch: "main", Commit: "HEAD"}, client.WaitOptions{})
			outs[i].doneAt = time.Now()
			if out.Build != nil {
				outs[i].build = out.Build.Number
			}
			if out.Status == client.Obtained {
				outs[i].status = serve.StatusObtained
			} else {
				outs[i].err = fmt.Errorf("%s", out.Result.Error)
			}
		}()
	}
	wg.Wait()
	return report(fake, outs, fmt.Sprintf("%d kbgen submit at once (no service), %s builds, stand-in limits %d/min org, %d/min per user", runs, build, limit, userLimit), time.Since(start), false)
}
