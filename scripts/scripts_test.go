// Package scripts_test runs the release scripts and the release pipeline
// as the release queue would: scripts/release.sh into a scratch dist,
// scripts/pin-images.sh against a stand-in registry, and
// .buildkite/release.yml through the real agent's dry-run.
package scripts_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/gpu-mode/kbgen/internal/bkagent"
	"github.com/gpu-mode/kbgen/sandbox"
)

// TestReleasePipelineDryRun: the real buildkite-agent accepts
// .buildkite/release.yml, every step is tag-only on the release queue, the
// tag reaches the commands, and every script a step runs exists and is
// executable.
func TestReleasePipelineDryRun(t *testing.T) {
	agent, err := bkagent.Installed(os.Getenv)
	if err != nil {
		t.Skipf("SKIP: %v; the release pipeline's agent dry-run was not run", err)
	}
	cmd := exec.Command(agent, "pipeline", "upload", "--dry-run", "--format", "json", "../.buildkite/release.yml")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "BUILDKITE_AGENT_ACCESS_TOKEN=planted-agent-token", "BUILDKITE_TAG=v1.2.3"}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("agent refused release.yml: %v\n%s", err, stderr.String())
	}
	var p struct {
		Agents map[string]string `json:"agents"`
		Steps  []struct {
			Key     string `json:"key"`
			Block   string `json:"block"`
			If      string `json:"if"`
			Command string `json:"command"`
		} `json:"steps"`
	}
	if err := json.Unmarshal(out, &p); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if p.Agents["queue"] != "kbgen-release" {
		t.Errorf("pipeline agents %v, want the release queue", p.Agents)
	}
	var keys []string
	for _, s := range p.Steps {
		keys = append(keys, s.Key)
		if s.If != "build.tag != null" {
			t.Errorf("step %s runs on builds without a tag (if: %q)", s.Key, s.If)
		}
		for _, line := range strings.Split(s.Command, "\n") {
			if strings.Contains(line, "BUILDKITE_TAG") {
				t.Errorf("step %s: $BUILDKITE_TAG not interpolated at upload: %q", s.Key, line)
			}
			for _, script := range regexp.MustCompile(`\bscripts/[\w.-]+`).FindAllString(line, -1) {
				st, err := os.Stat("../" + script)
				if err != nil || st.Mode()&0o111 == 0 {
					t.Errorf("step %s runs %s, which is not an executable file in the repository (%v)", s.Key, script, err)
				}
			}
		}
	}
	if got, want := strings.Join(keys, " "), "bases binaries image-cuda image-rocm pin approve publish"; got != want {
		t.Errorf("steps %q, want %q", got, want)
	}
	if !strings.Contains(string(out), `scripts/release.sh \"v1.2.3\"`) {
		t.Errorf("the binaries step does not build the tag:\n%s", out)
	}
}

// TestReleaseScript builds a release as the pipeline does, into a scratch
// directory: two static, stamped binaries, SHA256SUMS that check, and an
// SBOM per binary naming it by hash.
func TestReleaseScript(t *testing.T) {
	if testing.Short() {
		t.Skip("builds kbgen for two architectures")
	}
	dist := t.TempDir()
	const version = "v0.0.0-test.1"
	// What the script will stamp, read before it runs.
	commit, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	dirty, _ := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output()
	want := version
	if len(dirty) > 0 {
		want += "+dirty"
	}
	cmd := exec.Command("bash", "release.sh", version)
	cmd.Env = append(os.Environ(), "DIST="+dist)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("release.sh: %v\n%s", err, out)
	}
	sums, err := os.ReadFile(filepath.Join(dist, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(sums)), "\n") {
		f := strings.Fields(l)
		listed[f[1]] = f[0]
	}
	for _, arch := range []string{"amd64", "arm64"} {
		t.Run(arch, func(t *testing.T) {
			name := "kbgen-" + version + "-linux-" + arch
			bin := filepath.Join(dist, name)
			if err := sandbox.CheckStatic(bin); err != nil {
				t.Error(err)
			}
			data, err := os.ReadFile(bin)
			if err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256(data)
			if listed[name] != hex.EncodeToString(sum[:]) {
				t.Errorf("SHA256SUMS says %q for %s, the file hashes to %x", listed[name], name, sum)
			}
			var bom struct {
				Metadata struct {
					Component struct {
						Version string `json:"version"`
						Hashes  []struct{ Content string }
					} `json:"component"`
				} `json:"metadata"`
				Components []struct{ PURL string } `json:"components"`
			}
			sbom, err := os.ReadFile(bin + ".cdx.json")
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(sbom, &bom); err != nil {
				t.Fatal(err)
			}
			c := bom.Metadata.Component
			if c.Version != want || len(c.Hashes) != 1 || c.Hashes[0].Content != hex.EncodeToString(sum[:]) {
				t.Errorf("SBOM names %+v, want version %s and the binary's hash", c, want)
			}
			if !strings.Contains(string(sbom), "pkg:golang/github.com/alecthomas/kong@") {
				t.Error("SBOM lacks a linked module (kong)")
			}
			if arch != "amd64" {
				return
			}
			out, err := exec.Command(bin, "version").Output()
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(string(out), "kbgen "+want+" ("+strings.TrimSpace(string(commit))+", 20") {
				t.Errorf("kbgen version says %q, want %s at commit %s", out, want, commit)
			}
		})
	}
	// The NVML helper, for the host's arch (its C compiler is here): the
	// one binary linked against libc, summed and with its own SBOM.
	t.Run("kbgen-nvml", func(t *testing.T) {
		name := "kbgen-nvml-" + version + "-linux-" + runtime.GOARCH
		bin := filepath.Join(dist, name)
		if err := sandbox.CheckStatic(bin); !errors.Is(err, sandbox.ErrDynamic) {
			t.Errorf("CheckStatic(%s) = %v, want it dynamically linked (cgo)", name, err)
		}
		if listed[name] == "" {
			t.Errorf("SHA256SUMS does not list %s", name)
		}
		sbom, err := os.ReadFile(bin + ".cdx.json")
		if err != nil {
			t.Fatal(err)
		}
		var bom struct {
			Metadata struct {
				Component struct{ Name string } `json:"component"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(sbom, &bom); err != nil {
			t.Fatal(err)
		}
		if bom.Metadata.Component.Name != "kbgen-nvml" || !strings.Contains(string(sbom), "pkg:golang/github.com/NVIDIA/go-nvml@") {
			t.Errorf("SBOM names %q, want kbgen-nvml linking go-nvml", bom.Metadata.Component.Name)
		}
	})
}

// TestReleaseScriptRefusesABadVersion: a typo never becomes a release.
func TestReleaseScriptRefusesABadVersion(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"1.2.3", "v1.2", "latest", "v1.2.3 ; rm -rf /"} {
		cmd := exec.Command("bash", "release.sh", v)
		cmd.Env = append(os.Environ(), "DIST="+t.TempDir())
		out, err := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); err == nil || code != 2 || !strings.Contains(string(out), "not a version like v1.2.3") {
			t.Errorf("release.sh %q: exit %d %s", v, code, out)
		}
	}
}

// fakeCrane is a stand-in registry client on PATH: `crane digest REF`
// answers sha256 of REF's name:tag (salted, so a tag can "move"), or, for
// name:tag@sha256:D, D when D is what the tag resolves to; anything else
// is "not found", exit 1 (as crane does for a missing manifest).
func fakeCrane(t *testing.T, salt string) string {
	t.Helper()
	dir := t.TempDir()
	script := `#!/bin/bash
[ "$1" = digest ] || exit 2
ref=$2 name=${2%@*}
d="sha256:$(printf '%s' "` + salt + `$name" | sha256sum | cut -d' ' -f1)"
if [ "$name" != "$ref" ] && [ "${ref#*@}" != "$d" ]; then echo "MANIFEST_UNKNOWN: $ref" >&2; exit 1; fi
echo "$d"
`
	if err := os.WriteFile(filepath.Join(dir, "crane"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// repoCopy lays out what pin-images.sh touches in a scratch repository.
func repoCopy(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for _, f := range []string{"scripts/pin-images.sh", "images/cuda/Dockerfile", "images/rocm/Dockerfile", "registry/vendors.yaml"} {
		data, err := os.ReadFile("../" + f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, f), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func pinImages(t *testing.T, root, craneDir string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command("bash", append([]string{filepath.Join(root, "scripts/pin-images.sh")}, args...)...)
	path := "/usr/bin:/bin"
	if craneDir != "" {
		path = craneDir + ":" + path
	}
	cmd.Env = []string{"PATH=" + path, "HOME=" + t.TempDir()}
	out, _ := cmd.CombinedOutput()
	return string(out), cmd.ProcessState.ExitCode()
}

func digestOf(salt, name string) string {
	sum := sha256.Sum256([]byte(salt + name))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// TestPinImages: bases and registry images are pinned to what the
// registry answers, a second run changes nothing, --verify tells a digest
// the registry has from one it lacks, and with no way to ask a registry
// the script says so instead of guessing.
func TestPinImages(t *testing.T) {
	t.Parallel()
	root := repoCopy(t)
	crane := fakeCrane(t, "v1")

	out, code := pinImages(t, root, crane, "bases")
	if code != 0 {
		t.Fatalf("bases: exit %d\n%s", code, out)
	}
	df, _ := os.ReadFile(filepath.Join(root, "images/cuda/Dockerfile"))
	for _, want := range []string{
		"ARG GO_IMAGE=golang:1.26.8-bookworm@" + digestOf("v1", "golang:1.26.8-bookworm") + "\n",
		"ARG CUDA_IMAGE=nvidia/cuda:12.8.1-cudnn-devel-ubuntu24.04@" + digestOf("v1", "nvidia/cuda:12.8.1-cudnn-devel-ubuntu24.04") + "\n",
		"ARG TOOLCHAIN_IMAGE=toolchain\n", // a stage, not an image: left alone
	} {
		if !strings.Contains(string(df), want) {
			t.Errorf("cuda Dockerfile lacks %q after pinning:\n%s", want, out)
		}
	}
	if out, code = pinImages(t, root, crane, "bases"); code != 0 || strings.Contains(out, "pinned") {
		t.Errorf("second run changed something (exit %d):\n%s", code, out)
	}
	if out, code = pinImages(t, root, crane, "--verify", "bases"); code != 0 || strings.Count(out, "exists") != 4 {
		t.Errorf("verify after pinning: exit %d\n%s", code, out)
	}
	// The tags move on: the pinned digests are no longer what the stand-in
	// registry resolves, as a digest deleted from a registry.
	if out, code = pinImages(t, root, fakeCrane(t, "v2"), "--verify", "bases"); code != 1 || !strings.Contains(out, "is not in the registry") {
		t.Errorf("verify with missing digests: exit %d\n%s", code, out)
	}

	if out, code = pinImages(t, root, crane, "registry"); code != 0 {
		t.Fatalf("registry: exit %d\n%s", code, out)
	}
	reg, _ := os.ReadFile(filepath.Join(root, "registry/vendors.yaml"))
	if want := "    image: ghcr.io/gpu-mode/kbgen-runner-cuda:12.8.1@" + digestOf("v1", "ghcr.io/gpu-mode/kbgen-runner-cuda:12.8.1") + "\n"; !strings.Contains(string(reg), want) {
		t.Errorf("vendors.yaml lacks %q", want)
	}
	if regexp.MustCompile(`(?m)^    image: [^@\s]+$`).Match(reg) {
		t.Errorf("an image left unpinned:\n%s", reg)
	}

	if out, code = pinImages(t, repoCopy(t), "", "bases"); code != 1 || !strings.Contains(out, "neither crane nor docker buildx") {
		t.Errorf("no registry client: exit %d\n%s", code, out)
	}
	if out, code = pinImages(t, root, crane, "everything"); code != 2 || !strings.Contains(out, "usage:") {
		t.Errorf("bad argument: exit %d\n%s", code, out)
	}
}

// TestFuzzScriptDeadlineRace runs scripts/fuzz.sh with a stand-in go whose
// fuzzing run fails as Go 1.26's coordinator does when it races its own
// -fuzztime deadline (go.dev/issue/75804: "context deadline exceeded", no
// input written). With the committed seeds passing that is not a finding,
// even where findings fail the run; with a seed failing it is one.
func TestFuzzScriptDeadlineRace(t *testing.T) {
	t.Parallel()
	const race = `{"Action":"output","Package":"github.com/gpu-mode/kbgen/payload","Test":"FuzzDecode","Output":"--- FAIL: FuzzDecode (20.04s)\n"}
{"Action":"output","Package":"github.com/gpu-mode/kbgen/payload","Test":"FuzzDecode","Output":"    context deadline exceeded\n"}
{"Action":"fail","Package":"github.com/gpu-mode/kbgen/payload","Test":"FuzzDecode"}
{"Action":"fail","Package":"github.com/gpu-mode/kbgen/payload"}`
	tests := []struct {
		name  string
		seeds string // the stand-in's exit for the seed corpus run
		code  int
		want  string
	}{
		{"seeds pass: the race, not a finding", "0", 0, "not a finding: Go's fuzz coordinator stopped on its own -fuzztime deadline"},
		{"a seed fails: a finding", "1", 1, "NEW FUZZ FINDING"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			bin := t.TempDir()
			stub := "#!/bin/sh\ncase \"$*\" in\n*-fuzz=*) cat <<'EOF'\n" + race + "\nEOF\nexit 1 ;;\n*) exit " + tc.seeds + " ;;\nesac\n"
			if err := os.WriteFile(filepath.Join(bin, "go"), []byte(stub), 0o755); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("bash", "fuzz.sh", "FuzzDecode")
			cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "FUZZ_FINDINGS=fail")
			out, _ := cmd.CombinedOutput()
			if code := cmd.ProcessState.ExitCode(); code != tc.code || !strings.Contains(string(out), tc.want) {
				t.Errorf("exit %d, want %d saying %q:\n%s", cmd.ProcessState.ExitCode(), tc.code, tc.want, out)
			}
		})
	}
}
