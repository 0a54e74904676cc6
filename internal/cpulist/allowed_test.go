package cpulist

import (
	"slices"
	"testing"
	"testing/fstest"
)

// TestAllowed: the affinity is the status file's Cpus_allowed_list; a
// process without one, or without a status file, is an error.
func TestAllowed(t *testing.T) {
	t.Parallel()
	proc := fstest.MapFS{
		"42/status":   {Data: []byte("Name:\tsshd\nCpus_allowed:\tff\nCpus_allowed_list:\t0-1,4\nMems_allowed_list:\t0\n")},
		"43/status":   {Data: []byte("Name:\tbroken\n")},
		"self/status": {Data: []byte("Cpus_allowed_list:\t7\n")},
	}
	tests := []struct {
		name, pid string
		want      Set
		err       bool
	}{
		{"a list", "42", Set{0, 1, 4}, false},
		{"self", "self", Set{7}, false},
		{"no line", "43", nil, true},
		{"no process", "44", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Allowed(proc, tt.pid)
			if (err != nil) != tt.err || !slices.Equal(got, tt.want) {
				t.Errorf("Allowed(%s) = %v, %v; want %v, error %v", tt.pid, got, err, tt.want, tt.err)
			}
		})
	}
}
