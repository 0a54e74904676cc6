package sandbox

import (
	"fmt"
	"io"
	"strings"

	"github.com/gpu-mode/kbgen/internal/contract"
)

// WriteReport writes what `kbgen sandbox` says after a run into the job
// log (w): the container output it cut, what it vouched for and wrote to
// outDir (or that nothing verified), a failure writing it, and the host's
// noise with what follows from it.
func (o Outcome) WriteReport(w io.Writer, outDir string) {
	if o.LogDropped > 0 {
		fmt.Fprintf(w, "kbgen sandbox: the container's output was cut at %d bytes: %d bytes more were dropped\n", MaxLogBytes, o.LogDropped)
	}
	if v := o.Vouch; v != nil {
		if v.Verified {
			fmt.Fprintf(w, "kbgen sandbox: the result sealed by kbgen run verifies; wrote %s to %s (%s)\n", strings.Join(v.Files, ", "), outDir, v.Result.Describe())
		} else {
			fmt.Fprintf(w, "kbgen sandbox: %s; wrote the sandbox's failed %s to %s\n", v.Reason, contract.ResultFile, outDir)
		}
	}
	if o.WriteErr != nil {
		fmt.Fprintf(w, "kbgen sandbox: %v\n", o.WriteErr)
	}
	o.writeHostNoise(w)
}

// writeHostNoise is the report's line on the host section of noise.json.
func (o Outcome) writeHostNoise(w io.Writer) {
	if o.HostNoiseErr != nil {
		fmt.Fprintf(w, "kbgen sandbox: %v\n", o.HostNoiseErr)
		return
	}
	h := o.HostNoise
	if h == nil {
		return
	}
	then := "the exit code stands"
	if o.HostRetry {
		then = "the job is retried (exit 75)"
	}
	fmt.Fprintf(w, "kbgen sandbox: noise seen from the host over the whole job: %s (foreign CPU %.1f %% of CPUs %s); recorded in %s, %s\n", h.Verdict, h.Foreign.CPUPercent, h.CPUs, contract.NoiseFile, then)
}
