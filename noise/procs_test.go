package noise

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestContainerNoteNeedsEvidence: a VM whose init is not systemd (a
// Firecracker guest's process_api) sees every process, so the note that
// only the container's processes are visible needs real evidence.
func TestContainerNoteNeedsEvidence(t *testing.T) {
	for _, tc := range []struct {
		name   string
		files  map[string]string
		wantIn string // "" = no note
	}{
		{"firecracker VM", map[string]string{"proc/1/comm": "process_api\n", "proc/1/cgroup": "0::/\n"}, ""},
		{"host with systemd", map[string]string{"proc/1/comm": "systemd\n", "proc/1/cgroup": "0::/init.scope\n"}, ""},
		{"docker marker", map[string]string{"proc/1/comm": "sh\n", "proc/1/cgroup": "0::/\n", ".dockerenv": ""}, "/.dockerenv exists"},
		{"podman marker", map[string]string{"proc/1/comm": "sh\n", "run/.containerenv": ""}, "/run/.containerenv exists"},
		{"cgroup v1 path", map[string]string{"proc/1/comm": "bash\n", "proc/1/cgroup": "12:cpuset:/docker/0123abcd\n"}, "pid 1's cgroup is /docker/0123abcd"},
		{"kubernetes", map[string]string{"proc/1/comm": "pause\n", "proc/1/cgroup": "0::/kubepods/besteffort/pod1\n"}, "kubepods"},
		// The lent H100: a VM whose rootfs came from a Docker image keeps
		// /.dockerenv, but the initial pid namespace sees every process.
		{"VM from a docker image", map[string]string{"proc/1/comm": "process_api\n", ".dockerenv": "", "proc/self/ns/pid": "-> " + initPidNS}, ""},
		{"own pid namespace, no marker", map[string]string{"proc/1/comm": "sh\n", "proc/1/cgroup": "0::/\n", "proc/self/ns/pid": "-> pid:[4026532201]"}, "its own pid namespace pid:[4026532201]"},
		{"own pid namespace and a marker", map[string]string{"proc/1/comm": "sh\n", ".dockerenv": "", "proc/self/ns/pid": "-> pid:[4026532201]"}, "/.dockerenv exists"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for name, body := range tc.files {
				p := filepath.Join(root, name)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if target, ok := strings.CutPrefix(body, "-> "); ok {
					if err := os.Symlink(target, p); err != nil {
						t.Fatal(err)
					}
					continue
				}
				if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			r := foreignReport(filepath.Join(root, "proc"), 42, []int{1}, nil, map[int]procTimes{}, 1000)
			switch {
			case tc.wantIn == "" && r.Why != "":
				t.Errorf("why = %q, want no container note without evidence", r.Why)
			case tc.wantIn != "" && (!strings.Contains(r.Why, tc.wantIn) || !strings.Contains(r.Why, "in a container")):
				t.Errorf("why = %q, want the container note naming %q", r.Why, tc.wantIn)
			}
		})
	}
}
