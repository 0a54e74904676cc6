package main

import (
	"bytes"
	"compress/zlib"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gpu-mode/kbgen/examples"
	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/fakebuildkite"
	"github.com/gpu-mode/kbgen/internal/kbgenbin"
	"github.com/gpu-mode/kbgen/jobsource"
	"github.com/gpu-mode/kbgen/payload"
)

// Secrets planted in every environment below. Each has a distinctive part
// a grep cannot miss, and none is shorter than the agent's redaction
// minimum, so "it was redacted" cannot be why a test passes.
const (
	plantedAgentToken = "bkaj_PLANTED-agent-token-4d1c9e0b"
	plantedAPIToken   = "bkua_PLANTED-api-token-8b2f61aa"
	plantedVendor     = "PLANTED-vendor-cloud-secret-77aa19"
	plantedSigningKey = "/etc/kbgen/PLANTED-signing-key.json"
)

// leaker is a submission (for the identity example) that hunts for
// secrets everywhere a process can look: its environment, /proc/self,
// and the environ and cmdline of every process it can read (its parent,
// the runner, included). What it finds it prints to stderr, which lands in
// result.json, so a leak shows up in the outputs grepped below.
const leaker = `
import os, sys

MARK = "PLANT" + "ED"  # split, so a traceback quoting this line is no leak

def hunt(where, text):
    for word in text.replace("\0", "\n").split():
        if MARK in word or word.startswith(("KERNELBOT_PAYLOAD=", "eJ")):
            print("LEAK", where, word, file=sys.stderr)

for k, v in os.environ.items():
    hunt("env", k + "=" + v)
for pid in os.listdir("/proc"):
    if not pid.isdigit():
        continue
    for part in ("environ", "cmdline"):
        try:
            with open("/proc/%s/%s" % (pid, part), "rb") as f:
                hunt("/proc/%s/%s" % (pid, part), f.read().decode("utf-8", "replace"))
        except OSError:
            pass
print("leaker looked", file=sys.stderr)

def custom_kernel(data):
    return list(data)
`

// standInAgent writes a buildkite-agent that records its argv, stdin and
// the artifacts it is asked to upload under dir.
func standInAgent(t *testing.T, dir string) string {
	t.Helper()
	script := fmt.Sprintf(`#!/bin/sh
log=%q
printf '%%s\n' "$*" >> "$log/argv"
case "$1 $2" in
  "pipeline upload"|annotate*) cat >> "$log/stdin" ;;
  "artifact upload")
    for pats; do :; done # the patterns are the last argument, after the flags
    old=$IFS; IFS=';'
    for f in $pats; do cat "$f" >> "$log/artifacts" 2>/dev/null; done
    IFS=$old ;;
  "meta-data set") cat >> "$log/metadata" ;;
  "meta-data exists") exit 100 ;; # no key is set (the agent's clicommand/meta_data_exists.go)
esac
exit 0
`, dir)
	p := filepath.Join(dir, "buildkite-agent")
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// outputs collects everything a run left behind, by where it came from.
type outputs map[string]string

func (o outputs) addFiles(t *testing.T, prefix, dir string) {
	t.Helper()
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.IsDir() || e.Name() == "buildkite-agent" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		o[prefix+e.Name()] = string(b)
	}
}

// assertNoSecrets greps every output for every secret (and for a 24-byte
// piece of each, so a cut or wrapped copy is found too).
func assertNoSecrets(t *testing.T, o outputs, secrets map[string]string) {
	t.Helper()
	if len(o) == 0 {
		t.Fatal("no outputs collected: the check would prove nothing")
	}
	for where, text := range o {
		for name, s := range secrets {
			needles := []string{s}
			if len(s) > 48 {
				needles = append(needles, s[len(s)/2:len(s)/2+24])
			}
			for _, n := range needles {
				if strings.Contains(text, n) {
					i := strings.Index(text, n)
					t.Errorf("%s leaks %s: …%s…", where, name, text[max(0, i-60):min(len(text), i+len(n)+20)])
				}
			}
		}
	}
}

// sharedDir is a temporary directory the unprivileged user below can use
// (t.TempDir's parents are private to root).
func sharedDir(t *testing.T, mode os.FileMode) string {
	t.Helper()
	d, err := os.MkdirTemp("", "kbgen-secrets-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	if err := os.Chmod(d, mode); err != nil {
		t.Fatal(err)
	}
	return d
}

// asAgentUser runs cmd as an unprivileged user when the test runs as
// root: root may read every process's /proc/<pid>/environ (CAP_SYS_PTRACE),
// so as root the test could not tell a leak from a privilege. Vendor nodes
// run kbgen as the buildkite-agent user.
func asAgentUser(cmd *exec.Cmd) {
	if os.Geteuid() == 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	}
}

// encodeRaw wraps arbitrary text in the transport encoding, so the
// decoder gets as far as parsing it.
func encodeRaw(text string) string {
	var b bytes.Buffer
	w := zlib.NewWriter(&b)
	_, _ = w.Write([]byte(text))
	_ = w.Close()
	return base64.StdEncoding.EncodeToString(b.Bytes())
}

func leakerJob(t *testing.T) string {
	t.Helper()
	cfg, err := examples.Config("identity", payload.ModeTest, leaker)
	if err != nil {
		t.Fatal(err)
	}
	enc, err := payload.EncodeConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return enc
}

// TestSecretsNeverLeak plants an agent token, an API token, a vendor's
// cloud secret, a signing-key path and the payload, then runs each
// command a job passes through and greps every output: stdout, stderr,
// result.json, the annotation and artifacts, and the argv and stdin of the
// stand-in buildkite-agent. The hostile submissions (leaker above, and the
// identity example's cheat-env) look for them from inside. The real
// processes run as an unprivileged user, since /proc/<pid>/environ shows
// a process's environment as it was exec'd.
func TestSecretsNeverLeak(t *testing.T) {
	t.Run("kbgen run and kbgen local in process (cheat-env)", leaksNothingInProcess)
	// The unprivileged user cannot reach a python3 under /root (pyenv), so
	// the runs get a system PATH.
	sysPath := "/usr/local/bin:/usr/bin:/bin"
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		if _, err := os.Stat("/usr/local/bin/python3"); err != nil {
			t.Skip("SKIP: no python3 in /usr/bin or /usr/local/bin; the secrets test needs it to run the hostile submission")
		}
	}
	enc := leakerJob(t)
	secrets := map[string]string{
		"agent token":       plantedAgentToken,
		"API token":         plantedAPIToken,
		"vendor secret":     plantedVendor,
		"signing key path":  plantedSigningKey,
		"payload":           enc,
		"payload checksum":  payload.Checksum(enc),
		"any planted value": "PLANTED",
	}
	bin := kbgenbin.Path(t)

	agentEnv := func(agentDir string) []string {
		env := []string{
			"PATH=" + agentDir + string(os.PathListSeparator) + sysPath,
			"HOME=" + sharedDir(t, 0o777),
			"BUILDKITE_AGENT_ACCESS_TOKEN=" + plantedAgentToken,
			"BUILDKITE_API_TOKEN=" + plantedAPIToken,
			"AWS_SECRET_ACCESS_KEY=" + plantedVendor,
			"VENDOR_DB_PASSWORD=" + plantedVendor,
			"KBGEN_SIGNING_KEY=" + plantedSigningKey,
			"BUILDKITE_JOB_ID=0190-job", "BUILDKITE_BUILD_ID=0190-build",
			contract.EnvRunID + "=run-7", contract.EnvQueue + "=nvidia-h100",
		}
		for k, v := range payload.SplitEnv(enc) {
			env = append(env, k+"="+v)
		}
		return env
	}

	t.Run("kbgen run (the eval step)", func(t *testing.T) {
		agentDir, work := sharedDir(t, 0o777), sharedDir(t, 0o777)
		standInAgent(t, agentDir)
		cmd := exec.Command(bin, "run", "--out", filepath.Join(work, "result.json"))
		cmd.Dir = work
		cmd.Env = agentEnv(agentDir)
		asAgentUser(cmd)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		o := outputs{"stdout": stdout.String(), "stderr": stderr.String()}
		o.addFiles(t, "", work)
		o.addFiles(t, "buildkite-agent ", agentDir)
		if err != nil {
			t.Fatalf("kbgen run: %v\n%s", err, stderr.String())
		}
		// The checks above would pass on a run that never ran: prove the
		// leaker ran, and that the agent got the result and the annotation.
		if !strings.Contains(o["result.json"], "leaker looked") {
			t.Fatalf("the hostile submission did not run:\n%s", o["result.json"])
		}
		if !strings.Contains(o["buildkite-agent argv"], "meta-data set") || !strings.Contains(o["buildkite-agent argv"], "annotate") {
			t.Fatalf("stand-in agent saw: %q", o["buildkite-agent argv"])
		}
		// The result rides on the build's meta-data, compressed: grep it
		// as the reader will see it.
		_, res, err := payload.DecodeResultMetaData(o["buildkite-agent metadata"])
		if err != nil || !strings.Contains(string(res), `"success"`) {
			t.Fatalf("result.json was not set as meta-data (%v): %q", err, o["buildkite-agent metadata"])
		}
		o["buildkite-agent metadata"] = string(res)
		assertNoSecrets(t, o, secrets)
	})

	// The containerised path: the container's `kbgen run --no-upload`
	// writes result.json, then the gpu-docker hook on the host runs
	// `kbgen run --publish result.json` with the agent token in its env.
	t.Run("kbgen run --no-upload, then --publish on the host", func(t *testing.T) {
		agentDir, work := sharedDir(t, 0o777), sharedDir(t, 0o777)
		standInAgent(t, agentDir)
		res := filepath.Join(work, "result.json")
		for _, args := range [][]string{{"run", "--no-upload", "--out", res}, {"run", "--publish", res}} {
			cmd := exec.Command(bin, args...)
			cmd.Dir = work
			cmd.Env = agentEnv(agentDir)
			asAgentUser(cmd)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("kbgen %v: %v\n%s", args, err, stderr.String())
			}
			assertNoSecrets(t, outputs{fmt.Sprintf("stdout of %v", args): stdout.String(), fmt.Sprintf("stderr of %v", args): stderr.String()}, secrets)
		}
		o := outputs{}
		o.addFiles(t, "", work)
		o.addFiles(t, "buildkite-agent ", agentDir)
		if !strings.Contains(o["result.json"], "leaker looked") || !strings.Contains(o["buildkite-agent argv"], "annotate") {
			t.Fatalf("the leaker did not run or nothing was published:\n%s\n%s", o["result.json"], o["buildkite-agent argv"])
		}
		assertNoSecrets(t, o, secrets)
	})

	// Error paths: a payload that is corrupt (zlib), does not match its
	// checksum, is not base64, or is not JSON. The error must name the
	// problem, not quote the payload.
	t.Run("errors about a bad payload", func(t *testing.T) {
		corrupt := enc[:len(enc)/2] + strings.Repeat("A", len(enc)-len(enc)/2)
		for name, env := range map[string][]string{
			"corrupt zlib": {contract.EnvPayload + "=" + corrupt, contract.EnvPayloadSHA256 + "="},
			"checksum":     {contract.EnvPayload + "=" + enc, contract.EnvPayloadSHA256 + "=" + strings.Repeat("0", 64)},
			"not base64":   {contract.EnvPayload + "=" + enc + "%%", contract.EnvPayloadSHA256 + "="},
			"not JSON":     {contract.EnvPayload + "=" + encodeRaw("PLANTED-in-bad-json "+enc), contract.EnvPayloadSHA256 + "="},
		} {
			t.Run(name, func(t *testing.T) {
				agentDir, work := sharedDir(t, 0o777), sharedDir(t, 0o777)
				standInAgent(t, agentDir)
				cmd := exec.Command(bin, "run", "--out", filepath.Join(work, "result.json"))
				cmd.Dir = work
				cmd.Env = append(agentEnv(agentDir), env...) // later entries win
				asAgentUser(cmd)
				var stdout, stderr bytes.Buffer
				cmd.Stdout, cmd.Stderr = &stdout, &stderr
				if err := cmd.Run(); err == nil {
					t.Fatal("a bad payload ran")
				}
				o := outputs{"stdout": stdout.String(), "stderr": stderr.String()}
				o.addFiles(t, "", work)
				o.addFiles(t, "buildkite-agent ", agentDir)
				if !strings.Contains(o["result.json"], "invalid job") {
					t.Fatalf("result.json does not say why: %s", o["result.json"])
				}
				assertNoSecrets(t, o, secrets)

				genEnv := map[string]string{}
				for _, kv := range cmd.Env {
					k, v, _ := strings.Cut(kv, "=")
					genEnv[k] = v
				}
				delete(genEnv, "KBGEN_SIGNING_KEY")
				r := runKbgen(t, genEnv, "", "generate")
				if r.code != 65 {
					t.Fatalf("generate: exit %d: %s", r.code, r.stderr)
				}
				assertNoSecrets(t, outputs{"generate stdout": r.stdout, "generate stderr": r.stderr}, secrets)
			})
		}
	})

	t.Run("kbgen local", func(t *testing.T) {
		agentDir, work := sharedDir(t, 0o777), sharedDir(t, 0o777)
		standInAgent(t, agentDir)
		job := filepath.Join(work, "job.b64")
		if err := os.WriteFile(job, []byte(enc), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "local", "--payload-file", job, "--out", filepath.Join(work, "full.json"))
		cmd.Dir = work
		cmd.Env = agentEnv(agentDir)
		asAgentUser(cmd)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		_ = cmd.Run() // the identity test may pass or fail; only leaks matter
		o := outputs{"stdout": stdout.String(), "stderr": stderr.String()}
		o.addFiles(t, "", work)
		delete(o, "job.b64") // the input itself
		if !strings.Contains(o["full.json"], "leaker looked") {
			t.Fatalf("the hostile submission did not run:\nstderr %s\nresult %s", stderr.String(), o["full.json"])
		}
		assertNoSecrets(t, o, secrets)
	})

	t.Run("kbgen generate --upload (the bootstrap step)", func(t *testing.T) {
		agentDir := t.TempDir()
		agent := standInAgent(t, agentDir)
		env := map[string]string{}
		for _, kv := range agentEnv(agentDir) {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
		delete(env, "KBGEN_SIGNING_KEY") // a path that does not exist; signing has its own tests
		r := runKbgen(t, env, "", "generate", "--upload", "--agent", agent)
		if r.code != 0 {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		o := outputs{"stdout": r.stdout, "stderr": r.stderr}
		o.addFiles(t, "buildkite-agent ", agentDir)
		if !strings.Contains(o["buildkite-agent stdin"], "kbgen run") {
			t.Fatalf("no pipeline reached the agent: %q", o["buildkite-agent stdin"])
		}
		assertNoSecrets(t, o, secrets)
	})

	t.Run("kbgen sandbox (docker argv)", func(t *testing.T) {
		env := sandboxEnv(t)
		for _, kv := range agentEnv(t.TempDir()) {
			k, v, _ := strings.Cut(kv, "=")
			if k != "PATH" && k != contract.EnvQueue { // keep the placement's own queue binding
				env[k] = v
			}
		}
		r := runKbgen(t, env, "", "sandbox", "--dry-run", "--stage-dir", t.TempDir(), "--runner-binary", "/usr/local/bin/kbgen", "--", "kbgen", "run")
		if r.code != 0 || !strings.Contains(r.stdout, "docker") {
			t.Fatalf("exit %d: %s%s", r.code, r.stdout, r.stderr)
		}
		assertNoSecrets(t, outputs{"docker argv": r.stdout, "stderr": r.stderr}, secrets)
	})

	t.Run("kbgen submit", func(t *testing.T) {
		fake, env := fakeBK(t, fakebuildkite.QuickScript)
		job := filepath.Join(t.TempDir(), "job.b64")
		if err := os.WriteFile(job, []byte(enc), 0o600); err != nil {
			t.Fatal(err)
		}
		subSecrets := map[string]string{"API token": fake.Token, "payload": enc}
		o := outputs{}
		for i, args := range [][]string{
			{"--debug", "--progress=json"},
			{"--debug"},
		} {
			r := runKbgen(t, env, "", append([]string{"submit", "--queue", "nvidia-h100", "--payload-file", job, "--run-id", fmt.Sprintf("r%d", i)}, args...)...)
			if r.code != 0 {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			o[fmt.Sprintf("stdout %v", args)], o[fmt.Sprintf("stderr %v", args)] = r.stdout, r.stderr
		}
		// A wrong token: the 401 must not echo it.
		bad := map[string]string{}
		for k, v := range env {
			bad[k] = v
		}
		bad["BUILDKITE_API_TOKEN"] = plantedAPIToken
		r := runKbgen(t, bad, "", "submit", "--queue", "nvidia-h100", "--payload-file", job, "--debug")
		if r.code == 0 {
			t.Fatal("submit with a wrong token succeeded")
		}
		o["stdout (401)"], o["stderr (401)"] = r.stdout, r.stderr
		subSecrets["wrong API token"] = plantedAPIToken
		// What reached the storage host (the artifact's 302 target).
		for _, req := range fake.Requests() {
			if req.Server == "storage" {
				b, _ := json.Marshal(req)
				o["storage request "+req.Path] = string(b)
			}
		}
		if !strings.Contains(o["stderr [--debug]"], "api GET") {
			t.Fatalf("--debug logged nothing, so the check proves little: %q", o["stderr [--debug]"])
		}
		assertNoSecrets(t, o, subSecrets)
	})
}

// leaksNothingInProcess plants an agent token, an API token and the
// payload itself in the environment, runs the cheat that looks for
// secrets through `kbgen run` (job from KERNELBOT_PAYLOAD, with upload and
// annotation through a stand-in agent) and `kbgen local`, in process, and
// greps every output: stdout, stderr, result.json and the annotation.
func leaksNothingInProcess(t *testing.T) {
	needPython3(t)
	in, err := jobsource.Load(jobsource.Source{Example: "identity", Submission: "cheat-env", Mode: payload.ModeTest}, jobsource.Options{})
	if err != nil {
		t.Fatal(err)
	}
	enc := in.Encoded
	secrets := map[string]string{
		"BUILDKITE_AGENT_ACCESS_TOKEN": "bkagent-planted-4f1c",
		"BUILDKITE_API_TOKEN":          "bkapi-planted-9e2d",
		"KBGEN_SIGNING_KEY":            "signing-planted-77aa",
		"HF_TOKEN":                     "hf-planted-0b0b",
	}
	for k, v := range secrets {
		t.Setenv(k, v)
	}
	for k, v := range payload.SplitEnv(enc) {
		t.Setenv(k, v)
	}
	dir := t.TempDir()
	logs := fakeAgent(t, "none")
	out := filepath.Join(dir, "result.json")
	env := map[string]string{}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	run := runKbgen(t, env, "", "run", "--system", systemFile(t, dir), "--out", out)
	local := runKbgen(t, env, "", "local", "--example", "identity", "--submission", "cheat-env", "--mode", "test", "--system", systemFile(t, dir))
	if run.code != 0 || local.code != 0 {
		t.Fatalf("run exit %d (%s), local exit %d (%s)", run.code, run.stderr, local.code, local.stderr)
	}
	outputs := map[string]string{
		"run stdout": run.stdout, "run stderr": run.stderr,
		"local stdout": local.stdout, "local stderr": local.stderr,
	}
	for _, f := range []string{out} {
		b, _ := os.ReadFile(f)
		outputs[f] = string(b)
	}
	ents, _ := os.ReadDir(logs)
	for _, e := range ents {
		b, _ := os.ReadFile(filepath.Join(logs, e.Name()))
		outputs["agent call "+e.Name()] = string(b)
	}
	if len(ents) < 3 {
		t.Fatalf("the stand-in agent was not called for upload and annotate: %v", ents)
	}
	planted := []string{enc[:40]}
	for _, v := range secrets {
		planted = append(planted, v)
	}
	for name, text := range outputs {
		for _, s := range planted {
			if strings.Contains(text, s) {
				t.Errorf("%s contains the planted secret %q", name, s)
			}
		}
	}
	// The cheat reports what it found: nothing.
	if !strings.Contains(outputs[out], `leaked:\n`) || !strings.Contains(local.stdout, `leaked:\n`) {
		t.Errorf("the submission saw secrets:\n%s", outputs[out])
	}
}
