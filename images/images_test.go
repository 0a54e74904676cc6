// Package images holds the runner images' Dockerfiles; this test keeps
// them in step with the vendor registry and the sandbox's contract. No
// image is built here: base images cannot be pulled on a machine without a
// registry, and the digests are placeholders until a release build.
package images

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/pipelinegen"
	"github.com/gpu-mode/kbgen/sandbox"
)

// flavours maps a registry runtime to its Dockerfile.
var flavours = map[contract.Runtime]string{
	contract.RuntimeNVIDIA: "cuda/Dockerfile",
	contract.RuntimeROCm:   "rocm/Dockerfile",
}

var (
	declaredRef = regexp.MustCompile(`(?m)^# image: (\S+)$`)
	baseArg     = regexp.MustCompile(`(?m)^ARG (\w+_IMAGE)=(\S+)$`)
	pinned      = regexp.MustCompile(`^[a-z0-9./-]+:[A-Za-z0-9._-]+@sha256:[0-9a-f]{64}$`)
	fromLine    = regexp.MustCompile(`(?m)^FROM (\S+)(?: AS (\w+))?$`)
)

func readDockerfile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestDockerfiles(t *testing.T) {
	t.Parallel()
	gomod := readDockerfile(t, "../go.mod")
	goVersion := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindStringSubmatch(gomod)
	for _, path := range flavours {
		t.Run(path, func(t *testing.T) {
			t.Parallel()
			df := readDockerfile(t, path)
			args := map[string]string{}
			for _, m := range baseArg.FindAllStringSubmatch(df, -1) {
				args[m[1]] = m[2]
				if !pinned.MatchString(m[2]) {
					t.Errorf("%s=%s is not pinned by tag and digest", m[1], m[2])
				}
			}
			if !strings.HasPrefix(args["GO_IMAGE"], "golang:"+goVersion[1]+"-") {
				t.Errorf("GO_IMAGE %q does not match go.mod's go %s", args["GO_IMAGE"], goVersion[1])
			}
			froms := fromLine.FindAllStringSubmatch(df, -1)
			if len(froms) != 2 || froms[0][2] != "kbgen" {
				t.Fatalf("want two stages, the first named kbgen: %q", froms)
			}
			for _, f := range froms {
				name := strings.TrimSuffix(strings.TrimPrefix(f[1], "${"), "}")
				if _, ok := args[name]; !ok {
					t.Errorf("FROM %s is not one of the pinned ARGs", f[1])
				}
			}
			for _, want := range []string{
				"CGO_ENABLED=0 go build",
				"./cmd/kbgen",
				"COPY --from=kbgen /out/kbgen " + sandbox.ContainerRunner,
				"USER " + sandbox.ContainerUser,
				"python3-venv",
				`"torch==${TORCH_VERSION}"`,
				"import torch, triton",
				`CMD ["` + sandbox.ContainerRunner + `", "run"]`,
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

// TestRegistryImagesHaveDockerfiles checks every vendor's image is the one
// its runtime's Dockerfile declares (a digest pin on the registry side is
// fine: it is a build of that ref).
func TestRegistryImagesHaveDockerfiles(t *testing.T) {
	t.Parallel()
	reg, err := pipelinegen.LoadRegistry("")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range reg.Vendors {
		path, ok := flavours[v.Runtime]
		if !ok {
			t.Errorf("%s: runtime %q has no Dockerfile", v.Queue, v.Runtime)
			continue
		}
		m := declaredRef.FindStringSubmatch(readDockerfile(t, path))
		if m == nil {
			t.Fatalf("%s declares no image", path)
		}
		ref, _, _ := strings.Cut(v.Image, "@")
		if ref != m[1] {
			t.Errorf("%s: image %s, but %s builds %s", v.Queue, v.Image, path, m[1])
		}
	}
}
