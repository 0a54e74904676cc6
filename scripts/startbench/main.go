// Command startbench times kbgen as a whole process, as the bootstrap step
// runs it: `kbgen generate` with a 64 KiB job in the build env (or any
// other arguments), each run a fresh process. Given a second binary it
// alternates the two, run for run, and prints the ratio pair by pair, so a
// comparison holds while a shared machine's speed drifts. It is a script,
// not a test: docs/performance.md records its numbers with the command.
//
//	go build -o /tmp/new ./cmd/kbgen
//	git worktree add /tmp/old-src HEAD~1 && (cd /tmp/old-src && go build -o /tmp/old ./cmd/kbgen)
//	go run ./scripts/startbench -n 40 /tmp/new /tmp/old
//	go run ./scripts/startbench -n 40 -args version /tmp/new
package main

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/payload"
	"github.com/gpu-mode/kbgen/pipelinegen"
)

// sample is one finished run.
type sample struct {
	wall, cpu time.Duration
	rssKiB    int64
}

func main() {
	n := flag.Int("n", 40, "counted runs of each binary")
	warmup := flag.Int("warmup", 2, "runs of each binary not counted, first")
	args := flag.String("args", "generate", "kbgen's arguments, split at spaces")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: startbench [-n RUNS] [-args 'generate'] KBGEN [OTHER_KBGEN]")
		flag.PrintDefaults()
	}
	flag.Parse()
	bins := flag.Args()
	if len(bins) < 1 || len(bins) > 2 || *n < 1 {
		flag.Usage()
		os.Exit(2)
	}
	env, err := buildEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, "startbench:", err)
		os.Exit(1)
	}
	samples := make([][]sample, len(bins))
	for i := range *warmup + *n {
		for b, bin := range bins {
			s, err := runOnce(bin, strings.Fields(*args), env)
			if err != nil {
				fmt.Fprintf(os.Stderr, "startbench: %s: %v\n", bin, err)
				os.Exit(1)
			}
			if i >= *warmup {
				samples[b] = append(samples[b], s)
			}
		}
	}
	report(bins, *args, samples)
}

// buildEnv is the bootstrap step's build env for a leaderboard job whose
// submission is 80 KiB of random letters: about 64 KiB once encoded.
func buildEnv() ([]string, error) {
	in, err := pipelinegen.ExampleJob(payload.ModeLeaderboard)
	if err != nil {
		return nil, err
	}
	r := rand.New(rand.NewPCG(1, 2))
	text := make([]byte, 80<<10)
	for i := range text {
		text[i] = byte('a' + r.IntN(26))
	}
	cfg := *in.Config
	cfg.Sources = map[string]string{"eval.py": "", "submission.py": string(text)}
	enc, err := payload.EncodeConfig(&cfg)
	if err != nil {
		return nil, err
	}
	env := []string{"PATH=" + os.Getenv("PATH"), contract.EnvQueue + "=nvidia-h100", contract.EnvRunID + "=bench"}
	for k, v := range payload.SplitEnv(enc) {
		env = append(env, k+"="+v)
	}
	return env, nil
}

func runOnce(bin string, args, env []string) (sample, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		return sample{}, fmt.Errorf("%v: %s", err, out)
	}
	s := sample{wall: time.Since(start)}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		s.cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		s.rssKiB = ru.Maxrss
	}
	return s, nil
}

func report(bins []string, args string, samples [][]sample) {
	fmt.Printf("kbgen %s, %d runs each, alternating; medians\n", args, len(samples[0]))
	for b, bin := range bins {
		size := int64(0)
		if fi, err := os.Stat(bin); err == nil {
			size = fi.Size()
		}
		fmt.Printf("%-40s wall %6.2f ms  cpu %6.2f ms  peak RSS %5.1f MiB  binary %5.1f MB\n", bin,
			ms(median(samples[b], func(s sample) float64 { return float64(s.wall) })),
			ms(median(samples[b], func(s sample) float64 { return float64(s.cpu) })),
			median(samples[b], func(s sample) float64 { return float64(s.rssKiB) / 1024 }), float64(size)/1e6)
	}
	if len(bins) == 2 {
		ratio := func(f func(sample) time.Duration) float64 {
			rs := make([]float64, len(samples[0]))
			for i := range rs {
				rs[i] = float64(f(samples[0][i])) / float64(f(samples[1][i]))
			}
			slices.Sort(rs)
			return rs[len(rs)/2]
		}
		fmt.Printf("first/second, pair by pair: wall %.3f  cpu %.3f\n",
			ratio(func(s sample) time.Duration { return s.wall }), ratio(func(s sample) time.Duration { return s.cpu }))
	}
}

func median(ss []sample, f func(sample) float64) float64 {
	v := make([]float64, len(ss))
	for i, s := range ss {
		v[i] = f(s)
	}
	slices.Sort(v)
	return v[len(v)/2]
}

func ms(ns float64) float64 { return ns / 1e6 }
