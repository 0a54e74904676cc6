package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/examples"
	"github.com/gpu-mode/kbgen/internal/fakebuildkite"
	"github.com/gpu-mode/kbgen/internal/kbgenbin"
	"github.com/gpu-mode/kbgen/internal/testimage"
	"github.com/gpu-mode/kbgen/jobsource"
	"github.com/gpu-mode/kbgen/payload"
)

// printed is one command line a reader can copy: from a command's --help
// or a fenced block of README.md or docs/.
type printed struct {
	where string // "kbgen local --help", "docs/runner.md"
	line  string
}

// notHere are the printed lines that cannot run on a test machine, and
// why. They must still parse: each kbgen in them is run with --help.
var notHere = []struct {
	re     *regexp.Regexp
	reason string
	// unless marks the lines that run anyway: a fixture node's sysfs, or
	// a relative staging root an earlier line of the same page installed.
	unless *regexp.Regexp
}{
	{re: regexp.MustCompile(`^sudo `), reason: "needs root on a vendor node"},
	{re: regexp.MustCompile(`kbgen node install`), reason: "installs agents on this machine (the lines with a fixture --sysfs, or a control agent's with a relative --root, run)", unless: regexp.MustCompile(`^kbgen .*(--sysfs node/testdata/|--control.* --root [^/])`)},
	{re: regexp.MustCompile(`kbgen node env`), reason: "reads this machine's GPUs: needs a GPU node (the lines reading a staged --root run)", unless: regexp.MustCompile(`--root [^/]`)},
	{re: regexp.MustCompile(`kbgen node plan\s*($|#|--json)`), reason: "reads this machine's GPUs: needs a GPU node (the --sysfs line runs)"},
	{re: regexp.MustCompile(`kbgen doctor`), reason: "checks a vendor node (the --buildkite lines run against the local Buildkite, the lines reading a staged --root run)", unless: regexp.MustCompile(`--buildkite|^kbgen doctor .*--root [^/]`)},
	{re: regexp.MustCompile(`kbgen node qualify`), reason: "measures this machine's GPU agents or an installed --root with the runner image: needs a GPU node (the lines on a fixture --sysfs run)", unless: regexp.MustCompile(`--sysfs node/testdata/`)},
	{re: regexp.MustCompile(`kbgen generate --upload`), reason: "runs in a Buildkite job (buildkite-agent pipeline upload)"},
	{re: regexp.MustCompile(`kbgen run --publish`), reason: "runs in a Buildkite job (the agent token)"},
	{re: regexp.MustCompile(`kbgen serve`), reason: "a long-running service"},
	{re: regexp.MustCompile(`--server `), reason: "needs a running kbgen serve"},
	{re: regexp.MustCompile(`kbgen health`), reason: "asks a running kbgen serve"},
	{re: regexp.MustCompile(`kbgen verify`), reason: "asks a running kbgen serve to re-run a finished run on other agents (serve's TestVerify and cmd/kbgen's TestVerifyCmd run it against the local Buildkite)"},
	{re: regexp.MustCompile(`/etc/kbgen`), reason: "writes /etc/kbgen on this machine"},
}

// TestPrintedCommandLines runs every command line printed in --help,
// README.md and docs/ as printed, in order per page, in a directory laid out
// like the repository root (examples/, node/testdata/) with a job.json and
// job.b64 a reader would have, against the fake Buildkite server. A line
// passes if it exits 0, or 1 where its comment says it fails. The
// placeholder token of `export BUILDKITE_API_TOKEN=…` is replaced by the
// fake server's, and `go run ./cmd/kbgen` by the built kbgen.
func TestPrintedCommandLines(t *testing.T) {
	if testing.Short() {
		t.Skip("runs every printed command line")
	}
	needPython3(t)
	bin := kbgenbin.Path(t)
	fake := fakebuildkite.New(nil)
	t.Cleanup(fake.Close) // after the parallel pages, not when this function returns
	fake.SetScript(fakebuildkite.Script{BootStart: 50 * time.Millisecond, Uploaded: 100 * time.Millisecond, EvalStart: 150 * time.Millisecond, Finish: 500 * time.Millisecond})
	for range 1234 { // `kbgen wait 1234`, `kbgen result 1234`
		fake.Seed("seeded", "nvidia-h100", fakebuildkite.QuickScript, time.Hour)
	}
	lines := append(helpLines(t, bin), docLines(t)...)
	if len(lines) < 40 {
		t.Fatalf("found only %d printed command lines: the extraction is broken", len(lines))
	}
	shims := t.TempDir()
	if err := os.Symlink(bin, filepath.Join(shims, "kbgen")); err != nil {
		t.Fatal(err)
	}
	docker := dockerImageForRecipe(t)
	encoded := buildPayload(t)

	// Pages run in parallel, each in its own fresh repository root; a
	// page's lines run in order, as a reader types them (an export carries
	// on to the lines after it).
	for _, page := range byPage(lines) {
		t.Run(page[0].where, func(t *testing.T) {
			t.Parallel()
			dir, prelude := repoRoot(t), ""
			for _, p := range page {
				t.Run(p.line, func(t *testing.T) { runPrinted(t, p.line, prelude, docker, dir, shims, encoded, fake) })
				if strings.HasPrefix(p.line, "export ") {
					prelude += p.line + "\nexport BUILDKITE_API_TOKEN=\"$KBGEN_TEST_API_TOKEN\"\n"
				}
			}
		})
	}
}

// byPage splits lines into runs of the same page, in order.
func byPage(lines []printed) [][]printed {
	var pages [][]printed
	for i, p := range lines {
		if i == 0 || p.where != lines[i-1].where {
			pages = append(pages, nil)
		}
		pages[len(pages)-1] = append(pages[len(pages)-1], p)
	}
	return pages
}

// runPrinted runs one printed line after its page's exports, in dir: it
// must exit 0, or 1 where its comment says it fails.
func runPrinted(t *testing.T, line, prelude, docker, dir, shims, encoded string, fake *fakebuildkite.Server) {
	if reason := notRunnable(line, docker); reason != "" {
		parsesOnly(t, line, reason)
		return
	}
	script := prelude + strings.Replace(line, "go run ./cmd/kbgen", "kbgen", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir, cmd.Env = dir, cmdEnv(shims, dir, encoded, fake)
	out, _ := cmd.CombinedOutput()
	got := cmd.ProcessState.ExitCode()
	if strings.Contains(comment(line), "PASS or FAIL") {
		// A measurement whose verdict is this machine's load (kbgen node
		// qualify): it must run to a verdict, and its exit code must be
		// that verdict's; a usage or setup error is neither.
		if verdict := map[int]string{0: "\nPASS: ", 1: "\nFAIL: "}[got]; verdict == "" || !strings.Contains(string(out), verdict) {
			t.Errorf("exit %d without the verdict it stands for (PASS: and 0, or FAIL: and 1); output:\n%s", got, tailLines(string(out), 30))
		}
		return
	}
	want := 0
	if strings.Contains(comment(line), "fails") {
		want = 1
	}
	if got != want {
		t.Errorf("exit %d, want %d; output:\n%s", got, want, tailLines(string(out), 30))
	}
}

func cmdEnv(shims, dir, encoded string, fake *fakebuildkite.Server) []string {
	return []string{
		"PATH=" + shims + ":" + os.Getenv("PATH"), "HOME=" + dir, "TMPDIR=" + dir,
		"BUILDKITE_API_URL=" + fake.URL(), "BUILDKITE_API_TOKEN=" + fake.Token,
		"BUILDKITE_ORG=" + fake.Org, "BUILDKITE_PIPELINE=" + fake.Pipeline,
		"KBGEN_TEST_API_TOKEN=" + fake.Token,
		"KERNELBOT_PAYLOAD=" + encoded,
	}
}

// notRunnable says why a line cannot run here, or "".
func notRunnable(line, dockerReason string) string {
	for _, n := range notHere {
		if n.re.MatchString(line) && (n.unless == nil || !n.unless.MatchString(line)) {
			return n.reason
		}
	}
	if strings.Contains(line, "kbgen sandbox") && !strings.Contains(line, "--dry-run") && dockerReason != "" {
		return dockerReason
	}
	if _, err := exec.LookPath("jq"); err != nil && strings.Contains(line, "| jq") {
		return "no jq on this machine"
	}
	return ""
}

// parsesOnly runs each kbgen invocation in line with --help (before any
// `--`), in process: its command and flags must exist.
func parsesOnly(t *testing.T, line, reason string) {
	t.Helper()
	invocations := regexp.MustCompile(`kbgen [^|&;)"<>#]*`).FindAllString(line, -1)
	if len(invocations) == 0 {
		t.Fatalf("no kbgen invocation in %q", line)
	}
	for _, inv := range invocations {
		args := strings.Fields(inv)[1:]
		if i := indexOf(args, "--"); i >= 0 {
			args = args[:i]
		}
		r := runKbgen(t, nil, "", append(args, "--help")...)
		if r.code != 0 {
			t.Errorf("%q does not parse (exit %d): %s", inv, r.code, r.stderr)
		}
	}
	t.Logf("parsed only: %s", reason)
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

// comment is the shell comment at the end of a line, if any.
func comment(line string) string {
	if i := strings.Index(line, " #"); i >= 0 {
		return line[i:]
	}
	return ""
}

// isCommandLine reports whether a printed line is one to run.
func isCommandLine(s string) bool {
	if strings.ContainsAny(s, "─▶◀→") {
		return false // a diagram
	}
	for _, p := range []string{"kbgen ", "export ", "eval \"$(kbgen", "sudo kbgen", "go run ./cmd/kbgen", "mkdir -p "} {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// collect turns raw lines into command lines, joining `\` continuations.
func collect(where string, raw []string) []printed {
	var out []printed
	for i := 0; i < len(raw); i++ {
		s := strings.TrimPrefix(strings.TrimSpace(raw[i]), "$ ")
		if !isCommandLine(s) {
			continue
		}
		for strings.HasSuffix(s, `\`) && i+1 < len(raw) {
			i++
			s = strings.TrimSuffix(s, `\`) + strings.TrimSpace(raw[i])
		}
		out = append(out, printed{where: where, line: s})
	}
	return out
}

// helpLines are the indented example lines of every command's --help,
// above its Flags (a wrapped flag description is not a command line).
func helpLines(t *testing.T, bin string) []printed {
	t.Helper()
	top, _ := exec.Command(bin, "--help").Output()
	var cmds []string
	inCommands := false
	for _, l := range strings.Split(string(top), "\n") {
		switch {
		case l == "Commands:":
			inCommands = true
		case inCommands && strings.HasPrefix(l, "  ") && !strings.HasPrefix(l, "   "):
			f := strings.Fields(l)
			name := f[0]
			if len(f) > 1 && (name == "node") {
				name += " " + f[1]
			}
			cmds = append(cmds, name)
		}
	}
	if len(cmds) < 15 {
		t.Fatalf("found %d commands in kbgen --help", len(cmds))
	}
	var out []printed
	for _, c := range cmds {
		help, err := exec.Command(bin, append(strings.Fields(c), "--help")...).Output()
		if err != nil {
			t.Fatalf("kbgen %s --help: %v", c, err)
		}
		var raw []string
		for _, l := range strings.Split(string(help), "\n") {
			if l == "Flags:" || l == "Arguments:" {
				break
			}
			if strings.HasPrefix(l, "  ") {
				raw = append(raw, l)
			}
		}
		out = append(out, collect("kbgen "+c+" --help", raw)...)
	}
	return out
}

// docLines are the command lines in the fenced blocks of README.md and
// docs/*.md.
func docLines(t *testing.T) []printed {
	t.Helper()
	files, _ := filepath.Glob("../../docs/*.md")
	files = append([]string{"../../README.md"}, files...)
	var out []printed
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		var raw []string
		in := false
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			l := sc.Text()
			if strings.HasPrefix(strings.TrimSpace(l), "```") {
				in = !in
				continue
			}
			if in {
				raw = append(raw, l)
			}
		}
		fh.Close()
		out = append(out, collect(strings.TrimPrefix(f, "../../"), raw)...)
	}
	return out
}

// repoRoot is a fresh directory laid out like a fresh checkout's root,
// as far as the printed lines read it (examples/, node/testdata/).
func repoRoot(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{"examples", "node/testdata"} {
		if err := os.CopyFS(filepath.Join(dir, d), os.DirFS(filepath.Join("../..", d))); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// buildPayload is the KERNELBOT_PAYLOAD a Buildkite job of the identity
// example has: what a line printed for a job's environment reads. No
// job.json or job.b64 is laid out: a fresh checkout has none, so a page
// must make the files it uses (kbgen encode once printed `kbgen encode
// job.json`, which passed here and failed for every reader).
func buildPayload(t *testing.T) string {
	t.Helper()
	in, err := jobsource.Load(jobsource.Source{Example: "identity", Submission: examples.DefaultSubmission, Mode: payload.ModeTest}, jobsource.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return in.Encoded
}

// dockerImageForRecipe makes the runner image `kbgen sandbox --help`
// prints exist here: the python test image, tagged as the vendor's (no
// registry to pull it from). It returns why the sandbox lines cannot run,
// or "".
func dockerImageForRecipe(t *testing.T) string {
	t.Helper()
	if err := exec.Command("docker", "info").Run(); err != nil {
		return "no Docker engine"
	}
	if err := exec.Command("docker", "image", "inspect", testimage.PythonTag).Run(); err != nil {
		return "no " + testimage.PythonTag + " image (KBGEN_TEST_PYTHON_IMAGE=1 builds it)"
	}
	const vendorImage = "ghcr.io/gpu-mode/kbgen-runner-cuda:12.8.1"
	if err := exec.Command("docker", "image", "inspect", vendorImage).Run(); err == nil {
		return "" // a real one, or left by an earlier run
	}
	if out, err := exec.Command("docker", "tag", testimage.PythonTag, vendorImage).CombinedOutput(); err != nil {
		return "docker tag: " + string(out)
	}
	t.Cleanup(func() { _ = exec.Command("docker", "rmi", vendorImage).Run() })
	return ""
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
