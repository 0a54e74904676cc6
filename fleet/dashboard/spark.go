package dashboard

import (
	"fmt"
	"html/template"
	"math"
	"strings"
)

// Canary is an agent's canary series, drawn as a sparkline in its row.
type Canary struct {
	State string // fleet/canary's: baselining, ok, drift
	// Scores are its quiet canaries' scores, oldest first.
	Scores []float64
	// Baseline is its baseline's median; 0 while baselining.
	Baseline float64
	// Changes are the indexes into Scores where a new segment starts
	// (E-divisive change points).
	Changes []int
	// Off is the canary rule's offset verdict (fleet/canary's
	// Offset.Off): the row then says how far off its hardware's other
	// agents it is (Offset), as the canary_drift alarm does.
	Off    bool
	Offset float64
}

// Sparkline size in pixels.
const sparkW, sparkH, sparkPad = 120.0, 24.0, 2.0

// spark draws c as an inline SVG (no script, nothing fetched): the scores
// as a line, the baseline dashed, each change point a red vertical mark.
// Only numbers the template did not get from a host go into it.
func spark(c Canary) template.HTML {
	if len(c.Scores) == 0 {
		return ""
	}
	lo, hi := c.Scores[0], c.Scores[0]
	for _, s := range c.Scores {
		lo, hi = math.Min(lo, s), math.Max(hi, s)
	}
	if c.Baseline > 0 {
		lo, hi = math.Min(lo, c.Baseline), math.Max(hi, c.Baseline)
	}
	x := func(i int) float64 {
		if len(c.Scores) == 1 {
			return sparkW / 2
		}
		return sparkPad + float64(i)*(sparkW-2*sparkPad)/float64(len(c.Scores)-1)
	}
	y := func(v float64) float64 {
		if hi == lo {
			return sparkH / 2
		}
		return sparkH - sparkPad - (v-lo)/(hi-lo)*(sparkH-2*sparkPad)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="spark" width="%.0f" height="%.0f" role="img" aria-label="%d canaries; change points: %d">`, sparkW, sparkH, len(c.Scores), len(c.Changes))
	if c.Baseline > 0 {
		fmt.Fprintf(&b, `<line class="baseline" x1="0" x2="%.0f" y1="%.1f" y2="%.1f" stroke="#9ca3af" stroke-dasharray="3,2"/>`, sparkW, y(c.Baseline), y(c.Baseline))
	}
	for _, i := range c.Changes {
		if i >= 0 && i < len(c.Scores) {
			fmt.Fprintf(&b, `<line class="change" x1="%.1f" x2="%.1f" y1="0" y2="%.0f" stroke="#dc2626"/>`, x(i), x(i), sparkH)
		}
	}
	pts := make([]string, len(c.Scores))
	for i, s := range c.Scores {
		pts[i] = fmt.Sprintf("%.1f,%.1f", x(i), y(s))
	}
	fmt.Fprintf(&b, `<polyline fill="none" stroke="#2563eb" stroke-width="1.5" points="%s"/></svg>`, strings.Join(pts, " "))
	return template.HTML(b.String()) // numbers only: no caller text
}
