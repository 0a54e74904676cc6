package qualify

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/gpu-mode/kbgen/internal/exitcode"
)

// WriteJSON writes the report as indented JSON (HTML characters as they
// are: a reason quoting docker's stderr stays readable).
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable writes the agents' table, the GPU table when the GPU part
// ran for any agent, and the summary line.
func (r *Report) WriteTable(w io.Writer) error {
	rows := [][]string{{"AGENT", "CPUS", "CV %", "LOADED CV %", "SHIFT %", "STEAL %", "NOISY RUNS", "NOISE SOURCES", "VERDICT"}}
	gpuRows := [][]string{{"AGENT", "GPU", "MS PER MATMUL", "MATMULS PER SAMPLE", "CV %", "LOADED CV %", "SHIFT %", "NOISE SOURCES", "VERDICT"}}
	for _, a := range r.Agents {
		rows = append(rows, a.row())
		if a.GPU != nil {
			gpuRows = append(gpuRows, a.gpuRow())
		}
	}
	writeTable(w, rows)
	if len(gpuRows) > 1 {
		fmt.Fprintln(w)
		writeTable(w, gpuRows)
	}
	_, err := fmt.Fprintf(w, "\n%s: %d agents via %s; thresholds CV %g %%, shift %g %%, steal %g %%; %d kernel steps per repetition; GPU part: %s\n",
		strings.ToUpper(string(r.Verdict())), len(r.Agents), r.Launcher, r.Thresholds.MaxCV, r.Thresholds.MaxShift, r.Thresholds.MaxSteal, r.Iterations, r.GPU)
	return err
}

// Verdict is the node's: Pass when every agent passed.
func (r *Report) Verdict() Verdict {
	if r.Pass {
		return Pass
	}
	return Fail
}

// Err is the node's verdict as an exit: nil when every agent passed,
// else exit 1 with nothing more to say (the report said it).
func (r *Report) Err() error {
	if r.Pass {
		return nil
	}
	return exitcode.Silent(exitcode.Failure)
}

func (a AgentResult) row() []string {
	why := a.Why
	if a.Error != "" {
		why = []string{a.Error}
	}
	return []string{a.Name, a.CPUs, fmt.Sprintf("%.2f", a.CVPercent), pct(a.LoadedCVPercent, "%.2f"), pct(a.ShiftPercent, "%+.2f"),
		fmt.Sprintf("%.1f", a.StealPercent), fmt.Sprint(a.NoisyRuns), sources(a.NoiseSources), a.Verdict.Text(why, a.LoadSkipped)}
}

func (a AgentResult) gpuRow() []string {
	g := a.GPU
	return []string{a.Name, g.Device, fmt.Sprintf("%.4f", g.QuietMeanMS), fmt.Sprint(g.MatmulsPerSample), fmt.Sprintf("%.2f", g.CVPercent),
		pct(g.LoadedCVPercent, "%.2f"), pct(g.ShiftPercent, "%+.2f"), sources(g.NoiseSources), g.Verdict.Text(g.Why, g.LoadSkipped)}
}

func writeTable(w io.Writer, rows [][]string) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	tw.Flush()
}

// sources lists noise sources, "-" for none.
func sources(s []string) string {
	if j := strings.Join(s, ", "); j != "" {
		return j
	}
	return "-"
}

// pct prints a percentage that may be absent (no loaded phase) as "-".
func pct(p *float64, format string) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprintf(format, *p)
}
