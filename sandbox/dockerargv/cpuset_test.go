package dockerargv_test

import (
	"os"
	"slices"
	"testing"

	"github.com/gpu-mode/kbgen/internal/cpulist"
	"github.com/gpu-mode/kbgen/sandbox/dockerargv"
	"github.com/gpu-mode/kbgen/sandbox/dockerargv/dockerargvtest"
)

func TestParseCPUSet(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in string
		want     cpulist.Set
	}{
		{"one", "0", cpulist.Set{0}},
		{"ranges", "2-5,98-101", cpulist.Set{2, 3, 4, 5, 98, 99, 100, 101}},
		{"unsorted, repeated", "5,1-3,2", cpulist.Set{1, 2, 3, 5}},
		{"spaces", " 0-1 \n", cpulist.Set{0, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got, err := dockerargv.ParseCPUSet(tt.in); err != nil || !slices.Equal(got, tt.want) {
				t.Errorf("parseCPUSet(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
			}
		})
	}
	// A sysfs cpulist may be empty; a placement may not.
	for _, bad := range []string{"", "\n", "a", "3-1", "0-99999999"} {
		if got, err := dockerargv.ParseCPUSet(bad); err == nil {
			t.Errorf("parseCPUSet(%q) = %v, want an error", bad, got)
		}
	}
}

func TestPickKeepsSMTSiblingsTogether(t *testing.T) {
	t.Parallel()
	// 8 cores, CPU n and n+8 are siblings (as Linux numbers them on x86).
	sys := os.DirFS(dockerargvtest.FakeSysfs(t, dockerargvtest.SMTPairs(8)...))
	tests := []struct {
		name  string
		agent string
		n     int
		want  string
	}{
		{"all", "2-5,10-13", 8, "2-5,10-13"},
		{"two cores", "2-5,10-13", 4, "2-3,10-11"},
		{"one core", "2-5,10-13", 2, "2,10"},
		{"odd: the last core split, never a third core", "2-5,10-13", 3, "2-3,10"},
		{"one CPU", "2-5,10-13", 1, "2"},
		// The agent owns CPU 3 but not its sibling 11: 3 is a core of its own.
		{"half-owned core first", "3-5,12-13", 3, "3-4,12"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			agent, _ := dockerargv.ParseCPUSet(tt.agent)
			got, err := dockerargv.PickCPUs(agent, tt.n, sys)
			if err != nil || got.String() != tt.want {
				t.Errorf("pickCPUs(%s, %d) = %q, %v; want %q", tt.agent, tt.n, got, err, tt.want)
			}
		})
	}
	agent, _ := dockerargv.ParseCPUSet("2-5,10-13")
	if got, err := dockerargv.PickCPUs(agent, 9, sys); err == nil {
		t.Errorf("pickCPUs(9) of 8 CPUs = %s, want an error", got)
	}
}

func TestPickWithoutSysfs(t *testing.T) {
	t.Parallel()
	agent, _ := dockerargv.ParseCPUSet("2-5,10-13")
	tests := []struct {
		name string
		root string
	}{
		{"no topology files", t.TempDir()},
		{"no root at all", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := dockerargv.PickCPUs(agent, 3, os.DirFS(tt.root))
			if err != nil || got.String() != "2-4" {
				t.Errorf("pickCPUs without topology = %q, %v; want plain order 2-4", got, err)
			}
		})
	}
}
