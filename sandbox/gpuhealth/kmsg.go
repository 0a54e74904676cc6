package gpuhealth

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// DefaultKernelLog is the kernel's log as a device: one record per read,
// "prio,seq,usec,flags;text\n" (Documentation/ABI/testing/dev-kmsg). It
// is readable by a non-root user only where kernel.dmesg_restrict is 0
// (Ubuntu sets 1) or the reader has CAP_SYSLOG.
const DefaultKernelLog = "/dev/kmsg"

// maxKernelLog bounds what one check reads: the kernel's ring buffer is
// a few MiB at most (log_buf_len).
const maxKernelLog = 32 << 20

// KernelRecord is one kernel log record: its sequence number (which only
// grows within a boot), its text, and its syslog facility.
type KernelRecord struct {
	Seq  uint64
	Text string
	// Facility is the record's syslog facility, the prefix's prio >> 3:
	// 0 (LOG_KERN) only for what the kernel itself printed. A record
	// written from user space (/dev/kmsg, or syslog forwarded to it) is
	// never 0: devkmsg_write (kernel/printk/printk.c) enforces LOG_USER
	// when the writer names no facility or names 0.
	Facility int
}

// KernelFacility is LOG_KERN: the only facility a driver's record has.
const KernelFacility = 0

// ReadKernelLog reads every record the kernel still holds. The raw fd is
// non-blocking and read directly: an os.File of a pollable device would
// wait for the next record instead of reporting the end (EAGAIN). A
// regular file (a test's fixture) reads the same way.
func ReadKernelLog(path string) ([]KernelRecord, error) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer syscall.Close(fd)
	var all []byte
	buf := make([]byte, 64<<10)
	for len(all) < maxKernelLog {
		n, err := syscall.Read(fd, buf)
		switch {
		case errors.Is(err, syscall.EPIPE):
			continue // a record was overwritten while we read: go on
		case errors.Is(err, syscall.EAGAIN) || (err == nil && n == 0):
			return parseKernelLog(string(all)), nil
		case errors.Is(err, syscall.EINTR):
			continue
		case err != nil:
			return nil, &os.PathError{Op: "read", Path: path, Err: err}
		}
		all = append(all, buf[:n]...)
	}
	return parseKernelLog(string(all)), nil
}

// parseKernelLog splits /dev/kmsg's records ("prio,seq,usec,flags;text",
// prio being facility<<3 | level); continuation lines (" KEY=…") and
// anything malformed are skipped.
func parseKernelLog(s string) []KernelRecord {
	var out []KernelRecord
	for line := range strings.Lines(s) {
		head, text, ok := strings.Cut(strings.TrimRight(line, "\n"), ";")
		f := strings.Split(head, ",")
		if !ok || len(f) < 3 {
			continue
		}
		prio, perr := strconv.Atoi(f[0])
		seq, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil || perr != nil || prio < 0 {
			continue
		}
		out = append(out, KernelRecord{Seq: seq, Text: text, Facility: prio >> 3})
	}
	return out
}

// kernelLogSince returns the records after the sequence number the last
// check of this GPU stored in file, and stores the newest. The first
// check of a GPU (no file: after a reboot, /run is empty) only sets the
// baseline, as the ECC count does: what happened before it is no later
// job's concern. A sequence number lower than the stored one means the
// node rebooted under a kept file; everything is new then.
func kernelLogSince(records []KernelRecord, file string) []KernelRecord {
	var last uint64
	for _, r := range records {
		last = max(last, r.Seq)
	}
	prev, err := os.ReadFile(file)
	_ = os.WriteFile(file, []byte(strconv.FormatUint(last, 10)+"\n"), 0o660)
	if err != nil {
		return nil
	}
	p, err := strconv.ParseUint(strings.TrimSpace(string(prev)), 10, 64)
	if err != nil || p > last {
		p = 0
	}
	var out []KernelRecord
	for _, r := range records {
		if r.Seq > p {
			out = append(out, r)
		}
	}
	return out
}

// KernelLogFile is where the check keeps a GPU's last-read kernel log
// sequence number, beside its lease.
func KernelLogFile(dir, id string) string {
	return filepath.Join(dir, "gpu-"+id+".kmsg")
}
