package noise

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"strconv"
	"strings"

	"github.com/gpu-mode/kbgen/internal/lazyre"
)

// ROCmReport is the run's GPU as rocm-smi sees it before and after:
// clocks, temperature, power, and the KFD processes it lists. rocm-smi
// does not say which GPU a process uses, so processes are recorded, not
// judged; amd-smi is not read yet.
type ROCmReport struct {
	Availability
	Card   string      `json:"card,omitempty"`
	Before *ROCmSample `json:"before,omitempty"`
	After  *ROCmSample `json:"after,omitempty"`
	PIDs   []string    `json:"pids,omitempty"`
}

// ROCmSample is one rocm-smi reading of the card.
type ROCmSample struct {
	SCLKMHz      *float64 `json:"sclk_mhz,omitempty"`
	MCLKMHz      *float64 `json:"mclk_mhz,omitempty"`
	TemperatureC *float64 `json:"temperature_c,omitempty"`
	PowerW       *float64 `json:"power_w,omitempty"`
}

type rocmSample struct {
	card   string
	sample *ROCmSample
	pids   []string
	err    error
}

var mhz = lazyre.New(`([0-9.]+)\s*[Mm][Hh]z`)

// rocmProbe reads the first card rocm-smi lists (inside the sandbox the
// container sees only its own).
func rocmProbe(ctx context.Context, env []string) rocmSample {
	out, err := runTool(ctx, env, "rocm-smi", "--showtemp", "--showclocks", "--showpower", "--showpids", "--json")
	if err != nil {
		return rocmSample{err: err}
	}
	var doc map[string]map[string]any
	if err := json.Unmarshal(out, &doc); err != nil {
		return rocmSample{err: errors.New("rocm-smi --json printed something that is not JSON")}
	}
	var cards []string
	for k := range doc {
		if strings.HasPrefix(k, "card") {
			cards = append(cards, k)
		}
	}
	if len(cards) == 0 {
		return rocmSample{err: errors.New("rocm-smi lists no card")}
	}
	sort.Strings(cards)
	s := rocmSample{card: cards[0], sample: &ROCmSample{}}
	for k, v := range doc[cards[0]] {
		str, _ := v.(string)
		lk := strings.ToLower(k)
		switch {
		case strings.HasPrefix(lk, "sclk"):
			s.sample.SCLKMHz = parseMHz(str)
		case strings.HasPrefix(lk, "mclk"):
			s.sample.MCLKMHz = parseMHz(str)
		case strings.Contains(lk, "temperature") && (strings.Contains(lk, "junction") || s.sample.TemperatureC == nil):
			s.sample.TemperatureC = parseNum(str)
		case strings.Contains(lk, "power (w)"):
			s.sample.PowerW = parseNum(str)
		}
	}
	for k := range doc["system"] {
		if strings.HasPrefix(k, "PID") {
			s.pids = append(s.pids, strings.TrimPrefix(k, "PID"))
		}
	}
	return s
}

func parseMHz(s string) *float64 {
	m := mhz.FindStringSubmatch(s)
	if m == nil {
		return nil
	}
	return parseNum(m[1])
}

func parseNum(s string) *float64 {
	v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil {
		return nil
	}
	return &v
}

func rocmReport(before, after rocmSample) ROCmReport {
	switch {
	case errors.Is(before.err, errNotFound):
		return ROCmReport{Availability: unavailable("rocm-smi not found on PATH (amd-smi is not read)")}
	case before.err != nil:
		return ROCmReport{Availability: unavailable("rocm-smi: %v", before.err)}
	case after.err != nil:
		return ROCmReport{Availability: unavailable("rocm-smi: %v", after.err)}
	}
	r := ROCmReport{Availability: Availability{Status: OK, Why: "rocm-smi does not say which GPU a process uses: processes are recorded, not judged"}, Card: after.card, Before: before.sample, After: after.sample}
	seen := map[string]bool{}
	for _, p := range append(before.pids, after.pids...) {
		if !seen[p] {
			seen[p] = true
			r.PIDs = append(r.PIDs, p)
		}
	}
	return r
}
