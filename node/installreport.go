package node

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/gpu-mode/kbgen/internal/exitcode"
)

// InstallRequest is `kbgen node install`: the machine and queue to plan
// for (Source.Queue), where the token, key and plugin come from (Inputs,
// whose Root is the install root), the agents' options and DryRun.
type InstallRequest struct {
	Source Source
	Inputs Inputs
	// Options' Queue, Token, VerificationJWKS and Plugin are filled in
	// from the plan and Inputs.
	Options InstallOptions
	DryRun  bool
	// CheckSudoers checks the sudoers drop-in before it is written
	// (nil: Visudo).
	CheckSudoers SudoersCheck
}

// InstallReport is what an install did (or, DryRun, would do), and what
// the operator does next.
type InstallReport struct {
	Plan    *Plan
	DryRun  bool
	Results []Result
	// Done is false when Apply stopped part-way: Results says how far it
	// got, and nothing after them is known.
	Done bool
	// Stale are installed agent directories (gpuN, gpuN-migK, gpuxN-K)
	// no longer in the plan.
	Stale []string
	// TokenMissing: no token given and none installed.
	TokenMissing bool
}

// Install plans the machine, renders every file and applies them under
// Inputs.Root. The report is nil when nothing was applied; after a
// failure part-way it holds the files applied so far. Mistakes in the
// request carry exitcode.Usage.
func Install(ctx context.Context, req InstallRequest) (*InstallReport, error) {
	p, err := PlanSource(ctx, req.Source)
	if err != nil {
		return nil, err
	}
	// p.Queue, not the request's: an alias was resolved to the queue steps
	// target.
	opts := req.Options
	opts.Queue = p.Queue
	if err := req.Inputs.Load(&opts); err != nil {
		return nil, err
	}
	files, err := Render(p, opts)
	if err != nil {
		return nil, exitcode.With(exitcode.Usage, err)
	}
	if err := checkSudoers(ctx, req.CheckSudoers, p, files); err != nil {
		return nil, err
	}
	r := &InstallReport{Plan: p, DryRun: req.DryRun}
	if r.Results, err = Apply(req.Inputs.Root, files, req.DryRun); err != nil {
		return r, err
	}
	if r.Stale, err = StaleAgents(req.Inputs.Root, p); err != nil {
		return r, err
	}
	r.Done, r.TokenMissing = true, TokenMissing(req.Inputs.Root, opts.Token)
	return r, nil
}

// Write prints the plan's notes and each file's change to out; once the
// install is done, the stale agents with how to remove them, the agents to
// start and the housekeeping's next step, and a missing token to warn.
func (r *InstallReport) Write(out, warn io.Writer) {
	for _, n := range r.Plan.Notes {
		fmt.Fprintf(out, "note: %s\n", n)
	}
	writeResults(out, r.Results, r.DryRun)
	if !r.Done {
		return
	}
	for _, id := range r.Stale {
		// setup-node.sh reads these lines: the id, then the unit.
		fmt.Fprintf(out, "%-12s %s/%s: agent %s is not in the plan; systemctl disable --now %s, then remove the directory\n",
			"stale", ConfigDir, id, id, (&Agent{ID: id}).Unit())
	}
	if r.TokenMissing {
		fmt.Fprintf(warn, "kbgen: warning: no agent token given (--token-file or BUILDKITE_AGENT_TOKEN) and none installed: the agents will not start until %s exists\n", TokenFile)
	}
	fmt.Fprintf(out, "%d agents for queue %s; start them with: systemctl daemon-reload && systemctl enable --now %s\n",
		len(r.Plan.Agents), r.Plan.Queue, r.Plan.units())
	fmt.Fprintf(out, "housekeeping CPUs %s (cgroup v%d): %s; kbgen doctor checks it\n",
		r.Plan.HostCPUs, r.Plan.CgroupVersion, r.Plan.HousekeepingNextStep())
}

// units is every agent's systemd unit, space-separated.
func (p *Plan) units() string {
	names := make([]string, 0, len(p.Agents))
	for _, a := range p.Agents {
		names = append(names, a.Unit())
	}
	return strings.Join(names, " ")
}

// writeResults prints each file's change (or, dryRun, the change it
// would be), one line each.
func writeResults(out io.Writer, results []Result, dryRun bool) {
	verb := map[Change]string{Created: "created", Updated: "updated", Unchanged: "unchanged"}
	if dryRun {
		verb = map[Change]string{Created: "would create", Updated: "would update", Unchanged: "unchanged"}
	}
	for _, res := range results {
		fmt.Fprintf(out, "%-12s %s %s\n", verb[res.Change], res.Mode, res.Path)
	}
}

// checkSudoers runs check (nil: Visudo) on the sudoers drop-in among
// files, if there is one; a note when it could not check goes on p.
func checkSudoers(ctx context.Context, check SudoersCheck, p *Plan, files []File) error {
	if check == nil {
		check = Visudo
	}
	for _, f := range files {
		if f.Path != ResetSudoers {
			continue
		}
		note, err := check(ctx, f.Data)
		if note != "" {
			p.Notes = append(p.Notes, note)
		}
		return err
	}
	return nil
}
