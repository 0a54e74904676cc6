// Package images holds the runner images' Dockerfiles; these tests keep
// them in step with the vendor registry and the sandbox's contract, and
// build every stage that can be built without a registry.
package images

import (
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/golden"
	"github.com/gpu-mode/kbgen/internal/testimage"
	"github.com/gpu-mode/kbgen/registry"
	"github.com/gpu-mode/kbgen/sandbox/dockerargv"
)

// flavours maps a registry runtime to its Dockerfile and the ARG naming
// its GPU base image.
var flavours = map[contract.Runtime]struct{ path, baseArg string }{
	contract.RuntimeNVIDIA: {"cuda/Dockerfile", "CUDA_IMAGE"},
	contract.RuntimeROCm:   {"rocm/Dockerfile", "ROCM_IMAGE"},
}

var (
	declaredRef = regexp.MustCompile(`(?m)^# image: (\S+)$`)
	imageArg    = regexp.MustCompile(`(?m)^ARG (\w+_IMAGE)=(\S+)$`)
	pinned      = regexp.MustCompile(`^[a-z0-9./-]+:[A-Za-z0-9._-]+@sha256:[0-9a-f]{64}$`)
	fromLine    = regexp.MustCompile(`(?m)^FROM (\S+)(?: AS (\w+))?$`)
)

// isPlaceholder: a digest that is one nibble repeated (sha256:000…) is a
// stand-in typed by hand, not a registry's answer.
func isPlaceholder(ref string) bool {
	_, d, _ := strings.Cut(ref, "@sha256:")
	return d != "" && strings.Count(d, d[:1]) == len(d)
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestDockerfiles: three stages, each FROM a build ARG (so any can be
// replaced by a local image), the registry bases pinned by tag and a real
// digest, the Go stage on go.mod's Go version, the sandbox's user and path.
func TestDockerfiles(t *testing.T) {
	t.Parallel()
	gomod := readFile(t, "../go.mod")
	goVersion := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindStringSubmatch(gomod)
	for _, fl := range flavours {
		t.Run(fl.path, func(t *testing.T) {
			t.Parallel()
			df := readFile(t, fl.path)
			args := map[string]string{}
			for _, m := range imageArg.FindAllStringSubmatch(df, -1) {
				args[m[1]] = m[2]
			}
			for _, name := range []string{"GO_IMAGE", fl.baseArg} {
				switch ref := args[name]; {
				case !pinned.MatchString(ref):
					t.Errorf("%s=%q is not pinned by tag and digest", name, ref)
				case isPlaceholder(ref):
					t.Errorf("%s=%s has a placeholder digest: run scripts/pin-images.sh bases", name, ref)
				}
			}
			if args["TOOLCHAIN_IMAGE"] != "toolchain" {
				t.Errorf("TOOLCHAIN_IMAGE defaults to %q, want the toolchain stage", args["TOOLCHAIN_IMAGE"])
			}
			if !strings.HasPrefix(args["GO_IMAGE"], "golang:"+goVersion[1]+".") && !strings.HasPrefix(args["GO_IMAGE"], "golang:"+goVersion[1]+"-") {
				t.Errorf("GO_IMAGE %q does not match go.mod's go %s", args["GO_IMAGE"], goVersion[1])
			}
			froms := fromLine.FindAllStringSubmatch(df, -1)
			var stages []string
			for _, f := range froms {
				stages = append(stages, f[2])
				name := strings.TrimSuffix(strings.TrimPrefix(f[1], "${"), "}")
				if _, ok := args[name]; !ok {
					t.Errorf("FROM %s is not a build ARG: an offline build could not replace it", f[1])
				}
			}
			if got := strings.Join(stages, " "); got != "kbgen toolchain runner" {
				t.Fatalf("stages %q, want kbgen toolchain runner", got)
			}
			// Only the toolchain stage may need the network (apt, pip).
			_, runner, _ := strings.Cut(df, "AS runner\n")
			for _, net := range []string{"apt-get", "pip install"} {
				if strings.Contains(runner, net) {
					t.Errorf("the runner stage runs %s: it must build offline", net)
				}
			}
			for _, want := range []string{
				"CGO_ENABLED=0 go build -trimpath",
				"-X github.com/gpu-mode/kbgen/internal/version.Version=${KBGEN_VERSION}",
				"ARG GOPROXY=",
				"./cmd/kbgen",
				"COPY --from=kbgen /out/kbgen " + dockerargv.ContainerRunner,
				"USER " + dockerargv.ContainerUser,
				"python3-venv",
				`"torch==${TORCH_VERSION}"`,
				"import torch, triton",
				`CMD ["` + dockerargv.ContainerRunner + `", "run"]`,
			} {
				if !strings.Contains(df, want) {
					t.Errorf("lacks %q", want)
				}
			}
			if regexp.MustCompile(`(?m)^ENTRYPOINT`).MatchString(df) {
				t.Error("has an ENTRYPOINT: the sandbox's command would become its arguments")
			}
			if !declaredRef.MatchString(df) {
				t.Error(`no "# image: REF" line naming what it builds`)
			}
		})
	}
}

// TestDockerignore: the build context leaves out the history and the
// release output (46.6 MB of context with .git, before).
func TestDockerignore(t *testing.T) {
	t.Parallel()
	ignore := strings.Fields(readFile(t, "../.dockerignore"))
	for _, want := range []string{".git", "dist/"} {
		found := false
		for _, l := range ignore {
			found = found || l == want
		}
		if !found {
			t.Errorf(".dockerignore lacks %s", want)
		}
	}
}

// TestRegistryImagesHaveDockerfiles checks every vendor's image is the one
// its runtime's Dockerfile declares (a digest pin on the registry side is
// fine: it is a build of that ref).
func TestRegistryImagesHaveDockerfiles(t *testing.T) {
	t.Parallel()
	reg, err := registry.Load("")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range reg.Vendors {
		fl, ok := flavours[v.Runtime]
		if !ok {
			t.Errorf("%s: runtime %q has no Dockerfile", v.Queue, v.Runtime)
			continue
		}
		m := declaredRef.FindStringSubmatch(readFile(t, fl.path))
		if m == nil {
			t.Fatalf("%s declares no image", fl.path)
		}
		ref, _, _ := strings.Cut(v.Image, "@")
		if ref != m[1] {
			t.Errorf("%s: image %s, but %s builds %s", v.Queue, v.Image, fl.path, m[1])
		}
	}
}

// withoutStage is df minus the stage named name: its FROM line up to the
// next stage's section comment ("# ----") or FROM. The legacy builder, the
// only one on a machine without buildx, builds every stage of a file, so
// the stage that needs the network has to go for an offline build; BuildKit
// would skip it by itself.
func withoutStage(df, name string) string {
	lines := strings.SplitAfter(df, "\n")
	for i, l := range lines {
		if !strings.HasPrefix(l, "FROM ") || !strings.HasSuffix(l, " AS "+name+"\n") {
			continue
		}
		j := i + 1
		for j < len(lines) && !strings.HasPrefix(lines[j], "FROM ") && !strings.HasPrefix(lines[j], "# ----") {
			j++
		}
		return strings.Join(append(lines[:i:i], lines[j:]...), "")
	}
	return df
}

func TestWithoutStage(t *testing.T) {
	t.Parallel()
	df := "ARG A=x\nFROM a AS kbgen\nRUN 1\n\n# ---- tool\nFROM b AS toolchain\nRUN apt-get\n\n# ---- runner\nFROM ${T} AS runner\nRUN 3\n"
	want := "ARG A=x\nFROM a AS kbgen\nRUN 1\n\n# ---- tool\n# ---- runner\nFROM ${T} AS runner\nRUN 3\n"
	if got := withoutStage(df, "toolchain"); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

// bridgeGateway is the address containers of the default bridge network
// reach this machine at (docker0's IPv4).
func bridgeGateway(t *testing.T) string {
	t.Helper()
	out, _ := exec.Command("docker", "network", "inspect", "bridge", "--format", "{{range .IPAM.Config}}{{.Gateway}}{{end}}").Output()
	if gw := strings.TrimSpace(string(out)); gw != "" {
		return gw
	}
	if ifc, err := net.InterfaceByName("docker0"); err == nil {
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if ip, ok := a.(*net.IPNet); ok && ip.IP.To4() != nil {
				return ip.IP.String()
			}
		}
	}
	t.Skip("no docker bridge gateway (docker network inspect bridge, docker0) to serve the module proxy on")
	return ""
}

// proxyPort is tried first so that GOPROXY, a build arg and so part of the
// build cache's key, is the same from run to run and the Go stage's layers
// are reused; a random port when it is taken.
const proxyPort = "38471"

// moduleProxy serves this machine's module cache as a GOPROXY on host, so
// the Go stage's `go mod download` runs as written, offline. The cache is
// filled first with every module of go.mod's graph: `go build` and `go
// test` fetch only the packages they compile, and on a fresh machine the
// image's `go mod download` then asked for a .mod file nobody had fetched
// (jwx's secp256k1: 404).
func moduleProxy(t *testing.T, host string) string {
	t.Helper()
	download := exec.Command("go", "mod", "download")
	download.Dir = ".."
	if out, err := download.CombinedOutput(); err != nil {
		t.Fatalf("go mod download (to fill the module cache the image build is served from): %v\n%s", err, out)
	}
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", net.JoinHostPort(host, proxyPort))
	if err != nil {
		l, err = net.Listen("tcp", net.JoinHostPort(host, "0"))
	}
	if err != nil {
		t.Skipf("cannot listen on the docker bridge (%s) for a module proxy: %v", host, err)
	}
	srv := &http.Server{Handler: http.FileServer(http.Dir(filepath.Join(strings.TrimSpace(string(out)), "cache", "download")))}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + l.Addr().String()
}

// TestImagesBuildOffline builds each Dockerfile as far as a machine with no
// registry can: the Go stage on a local Go image with a local module proxy,
// the runner stage on a local image with python3 in place of the GPU
// toolchain (the one stage needing apt and pip), then runs the release's
// smoke test on the result: the built-in example through the image's own
// kbgen, as the sandbox runs it.
func TestImagesBuildOffline(t *testing.T) {
	goImage := testimage.Golang(t)
	base := testimage.Python(t)
	proxy := moduleProxy(t, bridgeGateway(t))
	for _, fl := range flavours {
		t.Run(fl.path, func(t *testing.T) {
			df := filepath.Join(t.TempDir(), "Dockerfile")
			if err := os.WriteFile(df, []byte(withoutStage(readFile(t, fl.path), "toolchain")), 0o644); err != nil {
				t.Fatal(err)
			}
			tag := "kbgen-test-runner-" + filepath.Dir(fl.path) + ":offline"
			build := exec.Command("docker", "build", "-f", df,
				"--build-arg", "GO_IMAGE="+goImage, "--build-arg", "GOPROXY="+proxy,
				"--build-arg", "TOOLCHAIN_IMAGE="+base, "--build-arg", "KBGEN_VERSION=v0.0.0-offline",
				"-t", tag, "..")
			if out, err := build.CombinedOutput(); err != nil {
				t.Fatalf("docker build: %v\n%s", err, out)
			}
			t.Cleanup(func() { _ = exec.Command("docker", "rmi", tag).Run() })
			smoke := exec.Command("bash", "../scripts/smoke-image.sh", tag)
			out, err := smoke.CombinedOutput()
			if err != nil {
				t.Fatalf("smoke test: %v\n%s", err, out)
			}
			for _, want := range []string{"kbgen v0.0.0-offline (", "smoke: passed ['test']"} {
				if !strings.Contains(string(out), want) {
					t.Errorf("smoke output lacks %q:\n%s", want, out)
				}
			}
		})
	}
}

// TestKbgenStageIsOneText: the kbgen stage (the static binary) is the same
// in every flavour's Dockerfile. Dockerfiles cannot include one another, so
// the stage is written once per file; this keeps the copies from drifting.
func TestKbgenStageIsOneText(t *testing.T) {
	t.Parallel()
	stage := func(path string) string {
		df := readFile(t, path)
		start := strings.Index(df, "FROM ${GO_IMAGE} AS kbgen")
		if start < 0 {
			t.Fatalf("%s has no kbgen stage", path)
		}
		end := strings.Index(df[start:], "\n# ----")
		if end < 0 {
			t.Fatalf("%s: no section after the kbgen stage", path)
		}
		return df[start : start+end]
	}
	want := stage(flavours[contract.RuntimeNVIDIA].path)
	for _, fl := range flavours {
		if got := stage(fl.path); got != want {
			t.Errorf("%s's kbgen stage differs from %s's:\n%s", fl.path, flavours[contract.RuntimeNVIDIA].path, golden.Diff([]byte(got), []byte(want)))
		}
	}
}
