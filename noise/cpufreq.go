package noise

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// FreqReport is the run's CPUs' clock, from cpufreq in sysfs: the lowest
// and highest current frequency before and after the run, and the
// hardware maximum. Informational: turbo falls under the job's own load,
// and a VM usually has no cpufreq at all.
type FreqReport struct {
	Availability
	BeforeMinMHz float64 `json:"before_min_mhz,omitempty"`
	BeforeMaxMHz float64 `json:"before_max_mhz,omitempty"`
	AfterMinMHz  float64 `json:"after_min_mhz,omitempty"`
	AfterMaxMHz  float64 `json:"after_max_mhz,omitempty"`
	HardwareMHz  float64 `json:"hardware_max_mhz,omitempty"`
}

// freqSample is each readable CPU's current frequency in kHz.
type freqSample map[int]float64

func readFreq(sysRoot string, cpus []int) freqSample {
	s := freqSample{}
	for _, c := range cpus {
		if khz, ok := readKHz(sysRoot, c, "scaling_cur_freq"); ok {
			s[c] = khz
		}
	}
	return s
}

func readKHz(sysRoot string, cpu int, name string) (float64, bool) {
	b, err := os.ReadFile(filepath.Join(sysRoot, "devices/system/cpu", "cpu"+strconv.Itoa(cpu), "cpufreq", name))
	if err != nil {
		return 0, false
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(string(b)), 64)
	return v, err == nil
}

func minMaxMHz(s freqSample) (lo, hi float64) {
	first := true
	for _, khz := range s {
		mhz := khz / 1000
		if first || mhz < lo {
			lo = mhz
		}
		if first || mhz > hi {
			hi = mhz
		}
		first = false
	}
	return lo, hi
}

func freqReport(sysRoot string, cpus []int, before, after freqSample) FreqReport {
	if len(before) == 0 || len(after) == 0 {
		return FreqReport{Availability: unavailable("no cpufreq in %s for CPUs %s (usual in a VM)", filepath.Join(sysRoot, "devices/system/cpu"), formatCPUs(cpus))}
	}
	r := FreqReport{Availability: Availability{Status: OK}}
	r.BeforeMinMHz, r.BeforeMaxMHz = minMaxMHz(before)
	r.AfterMinMHz, r.AfterMaxMHz = minMaxMHz(after)
	if len(cpus) > 0 {
		if khz, ok := readKHz(sysRoot, cpus[0], "cpuinfo_max_freq"); ok {
			r.HardwareMHz = khz / 1000
		}
	}
	return r
}
