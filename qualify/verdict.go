package qualify

import "strings"

// Verdict is the outcome for an agent or its GPU: "pass" or "fail" in the
// report's JSON. (A calibration run's own noise verdict is noise.Verdict.)
type Verdict string

const (
	Pass Verdict = "pass"
	Fail Verdict = "fail"
)

// verdictOf is the verdict of a measurement whose crossed thresholds are
// why: Pass when none was.
func verdictOf(why []string) Verdict {
	if len(why) > 0 {
		return Fail
	}
	return Pass
}

// Text is the verdict as the report's tables print it, one rule for the
// agent and the GPU table: "fail: reason; reason (note)".
func (v Verdict) Text(why []string, note string) string {
	s := string(v)
	if len(why) > 0 {
		s += ": " + strings.Join(why, "; ")
	}
	if note != "" {
		s += " (" + note + ")"
	}
	return s
}
