package nvsmi

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// TestBusID: nvidia-smi's eight-digit domain becomes sysfs's four, lower
// case; anything else is refused.
func TestBusID(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want, err string }{
		{"00000000:18:00.0", "0000:18:00.0", ""},
		{" 00000001:3B:1F.7 ", "0001:3b:1f.7", ""},
		{"0000:c1:00.0", "0000:c1:00.0", ""},
		{"00000000:18:00", "", `bad PCI bus id "00000000:18:00"`},
		{"00000000:18:20.0", "", "bad PCI bus id"},
		{"00000000:18:00.8", "", "bad PCI bus id"},
		{"100000000:18:00.0", "", "bad PCI bus id"},
		{"18:00.0", "", "bad PCI bus id"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			got, err := BusID(tt.in)
			// The message quotes what was read: the operator's clue.
			if got != tt.want || (err == nil) != (tt.err == "") || (err != nil && (!errors.Is(err, ErrBusID) || !strings.Contains(err.Error(), tt.err))) {
				t.Errorf("BusID(%q) = %q, %v; want %q, error %q", tt.in, got, err, tt.want, tt.err)
			}
		})
	}
}

// TestBusKey: the three forms a GPU's address comes in are one key.
func TestBusKey(t *testing.T) {
	t.Parallel()
	for _, in := range []string{"00000000:3B:00.0", "0000:3b:00.0", "0000:3b:00", " 0000:3B:00 "} {
		if got := BusKey(in); got != "0000:3b:00" {
			t.Errorf("BusKey(%q) = %q, want 0000:3b:00", in, got)
		}
	}
	if got := BusKey("GPU-X"); got != "gpu-x" {
		t.Errorf("BusKey(GPU-X) = %q, want it only lower-cased", got)
	}
}

// TestRowsAndApps: rows are keyed by their first field, other widths
// skipped; a process line needs a numeric pid.
func TestRowsAndApps(t *testing.T) {
	t.Parallel()
	out := []byte("GPU-a, 999, miner, 60000\nGPU-b, 12, python3, 512\nGPU-a, [N/A], x, 1\nbroken line\n")
	rows := Rows(out, 4)
	if len(rows) != 2 || !slices.Equal(rows["GPU-b"], []string{"GPU-b", "12", "python3", "512"}) {
		t.Errorf("Rows = %q", rows)
	}
	all := ParseApps(out, "")
	want := []App{{GPU: "GPU-a", PID: 999, Name: "miner", UsedMiB: 60000}, {GPU: "GPU-b", PID: 12, Name: "python3", UsedMiB: 512}}
	if !slices.Equal(all, want) {
		t.Errorf("ParseApps = %+v, want %+v", all, want)
	}
	if a := ParseApps(out, "GPU-b"); len(a) != 1 || a[0].PID != 12 {
		t.Errorf("ParseApps(GPU-b) = %+v", a)
	}
}

// TestPowerLimits: watts by UUID; a GPU without a limit, or a number that
// is none, is left out.
func TestPowerLimits(t *testing.T) {
	t.Parallel()
	out := []byte("GPU-a, 700.00\nGPU-b, [N/A]\nGPU-c, [Not Supported]\nGPU-d, -1\nGPU-e, 350\nmalformed\n")
	got := PowerLimits(out)
	if len(got) != 2 || got["GPU-a"] != 700 || got["GPU-e"] != 350 {
		t.Errorf("PowerLimits = %v, want GPU-a 700 and GPU-e 350", got)
	}
}
