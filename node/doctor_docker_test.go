package node

import (
	"archive/tar"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/sandbox/dockerargv"
)

const probeImage = "kbgen-node-probe-busybox:1"

// busyboxImage imports a one-binary image (Debian's busybox-static) into
// the local engine: no registry is needed.
func busyboxImage(t *testing.T) {
	t.Helper()
	if err := exec.Command("docker", "info").Run(); err != nil {
		t.Skip("docker info fails: the doctor's probe is not run in a real container")
	}
	if exec.Command("docker", "image", "inspect", probeImage).Run() == nil {
		return
	}
	bb, err := exec.LookPath("busybox")
	if err != nil {
		t.Skip("busybox not installed (apt-get install busybox-static): no probe image")
	}
	data, err := os.ReadFile(bb)
	if err != nil {
		t.Fatal(err)
	}
	tarPath := filepath.Join(t.TempDir(), "rootfs.tar")
	f, err := os.Create(tarPath)
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(f)
	tw.WriteHeader(&tar.Header{Name: "bin/", Typeflag: tar.TypeDir, Mode: 0o755})
	tw.WriteHeader(&tar.Header{Name: "bin/busybox", Mode: 0o755, Size: int64(len(data))})
	tw.Write(data)
	for _, applet := range []string{"sh", "cat", "sed", "echo"} {
		tw.WriteHeader(&tar.Header{Name: "bin/" + applet, Typeflag: tar.TypeSymlink, Linkname: "busybox"})
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	out, err := exec.Command("docker", "import", "--change", "ENV PATH=/bin", tarPath, probeImage).CombinedOutput()
	if err != nil {
		t.Fatalf("docker import: %v\n%s", err, out)
	}
}

// TestDoctorProbeRealContainer runs one agent's isolation probe in a real
// container with the sandbox's argv (GPU flags off: no GPU runtime here)
// and checks the limits the container reports are the agent's.
func TestDoctorProbeRealContainer(t *testing.T) {
	t.Parallel()
	busyboxImage(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := &Plan{Runtime: contract.RuntimeNVIDIA, Agents: []Agent{{
		ID: "gpu0", GPU: GPU{Index: 0, UUID: "GPU-00000000-1111-2222-3333-444444444444"},
		CPUSet: "0", CPUs: 1, Mems: "0", Memory: "256m", MemoryBytes: 256 << 20,
	}}}
	d := &Doctor{Runner: ExecRunner{}, Image: probeImage, RunnerBinary: exe,
		SandboxHost: dockerargv.LocalHost(), NoGPU: true}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := d.checkIsolation(ctx, p, &p.Agents[0], true)
	t.Logf("probe: %s", c.Detail)
	if c.OK {
		t.Fatalf("probe without a GPU passed: %s", c.Detail)
	}
	if strings.Contains(c.Detail, "docker run") {
		t.Skipf("this engine cannot run the sandbox's argv: %s", c.Detail)
	}
	if !strings.Contains(c.Detail, "sees 0 GPUs") {
		t.Errorf("no GPU flags, yet: %s", c.Detail)
	}
	for _, limit := range []string{"cpuset", "mems", "memory.max"} {
		if strings.Contains(c.Detail, limit+" ") {
			t.Errorf("container does not see the agent's %s: %s", limit, c.Detail)
		}
	}
	if strings.Contains(c.Detail, "memory.swap.max") {
		if _, err := os.Stat("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes"); err == nil || fileExists("/sys/fs/cgroup/cgroup.controllers") {
			t.Errorf("swap visible although the engine can limit it: %s", c.Detail)
		} else {
			t.Logf("swap limit not checked: this kernel has no swap accounting (%s)", c.Detail)
		}
	}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }
