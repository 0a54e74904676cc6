package gpuhealth

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestReadKernelLogDevice: the real /dev/kmsg is read to its end and the
// read returns (a blocking read would wait for the next record), where
// this user may read it.
func TestReadKernelLogDevice(t *testing.T) {
	t.Parallel()
	if _, err := os.Open(DefaultKernelLog); err != nil {
		t.Skipf("%s not readable here: %v", DefaultKernelLog, err)
	}
	done := make(chan error, 1)
	go func() {
		recs, err := ReadKernelLog(DefaultKernelLog)
		if err == nil && len(recs) == 0 {
			t.Log("the kernel log holds no records")
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("reading /dev/kmsg blocked: the check would hang every job")
	}
}

// TestParseKernelLog: records keep their sequence number, text and
// facility (prio >> 3: 0 for the kernel's, 1 for a /dev/kmsg write, 3 for
// a daemon's syslog); continuation lines and malformed lines are skipped.
func TestParseKernelLog(t *testing.T) {
	t.Parallel()
	got := parseKernelLog("6,7,100,-;first; with a semicolon\n SUBSYSTEM=pci\nnot a record\n4,x,1,-;bad seq\nx,8,1,-;bad prio\n3,9,200,c;second\n12,10,300,-;from user space\n30,11,400,-;from a daemon\n")
	want := []KernelRecord{{7, "first; with a semicolon", 0}, {9, "second", 0}, {10, "from user space", 1}, {11, "from a daemon", 3}}
	if !slices.Equal(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

// TestKernelLogSince: the records after the stored sequence number, the
// newest stored; none on the first check (baseline).
func TestKernelLogSince(t *testing.T) {
	t.Parallel()
	recs := []KernelRecord{{Seq: 5, Text: "a"}, {Seq: 6, Text: "b"}, {Seq: 8, Text: "c"}}
	tests := []struct {
		name, stored string
		want         int
	}{
		{"first check", "", 0},
		{"two new", "5", 2},
		{"none new", "8", 0},
		{"a reboot", "100", 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			file := filepath.Join(t.TempDir(), "gpu-x.kmsg")
			if tt.stored != "" {
				must(t, os.WriteFile(file, []byte(tt.stored), 0o644))
			}
			if got := kernelLogSince(recs, file); len(got) != tt.want {
				t.Errorf("got %v, want %d records", got, tt.want)
			}
			if b, _ := os.ReadFile(file); string(b) != "8\n" {
				t.Errorf("stored %q, want 8", b)
			}
		})
	}
}

// BenchmarkReadKernelLog: what reading the whole kernel log costs each
// check (docs/performance.md).
func BenchmarkReadKernelLog(b *testing.B) {
	if _, err := os.Open(DefaultKernelLog); err != nil {
		b.Skipf("%s not readable here: %v", DefaultKernelLog, err)
	}
	n := 0
	for b.Loop() {
		recs, err := ReadKernelLog(DefaultKernelLog)
		if err != nil {
			b.Fatal(err)
		}
		n = len(recs)
	}
	b.ReportMetric(float64(n), "records")
}
