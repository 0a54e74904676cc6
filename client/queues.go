package client

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	buildkite "github.com/buildkite/go-buildkite/v4"
)

// DefaultQueue is the queue of an agent started without a queue tag.
const DefaultQueue = "default"

// Agent is one connected Buildkite agent.
type Agent struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	Busy    bool   `json:"busy"`
	Paused  bool   `json:"paused,omitempty"`
	Job     string `json:"job,omitempty"` // the running job's step label
	// Tags are the agent's tags (Buildkite's meta_data, "key=value"),
	// for kbgen serve's roster (contract.NodeTag, contract.GPUsTag); not
	// part of the queue status's JSON.
	Tags map[string]string `json:"-"`
}

// QueueStatus is one queue's capacity and backlog.
type QueueStatus struct {
	Queue   string  `json:"queue"`
	Total   int     `json:"total"`
	Idle    int     `json:"idle"`
	Busy    int     `json:"busy"`
	Waiting int     `json:"waiting"` // builds submitted to the queue that no agent runs yet
	Agents  []Agent `json:"agents"`
}

// maxListedBuilds bounds how many unfinished builds Queues reads; a
// backlog beyond that is reported as at least this many.
const maxListedBuilds = 1000

// Queues reports agents per queue (from the `queue=` agent tag) and the
// builds waiting for each: scheduled or running builds of the pipeline
// whose jobs are not yet running on an agent. With only set, just that
// queue (reported even when it has no agents).
func (c *Client) Queues(ctx context.Context, only string) ([]QueueStatus, error) {
	agents, err := c.listAgents(ctx)
	if err != nil {
		return nil, err
	}
	builds, err := c.ListBuilds(ctx, []string{StateScheduled, StateRunning}, maxListedBuilds)
	if err != nil {
		return nil, err
	}
	byQueue := map[string]*QueueStatus{}
	get := func(q string) *QueueStatus {
		if byQueue[q] == nil {
			byQueue[q] = &QueueStatus{Queue: q, Agents: []Agent{}}
		}
		return byQueue[q]
	}
	if only != "" {
		get(only)
	}
	for _, a := range agents {
		if a.ConnectedState != "" && a.ConnectedState != "connected" {
			continue
		}
		q := agentQueue(a.Metadata)
		ag := Agent{Name: a.Name, Version: a.Version, Busy: a.Job != nil, Paused: a.Paused != nil && *a.Paused, Tags: agentTags(a.Metadata)}
		if a.Job != nil {
			ag.Job = jobName(a.Job.Name, a.Job.Label)
		}
		s := get(q)
		s.Total++
		switch {
		case ag.Busy:
			s.Busy++
		case !ag.Paused:
			s.Idle++
		}
		s.Agents = append(s.Agents, ag)
	}
	for i := range builds {
		if q := builds[i].Queue(); q != "" && waiting(&builds[i]) {
			get(q).Waiting++
		}
	}
	var out []QueueStatus
	for q, s := range byQueue {
		if only != "" && q != only {
			continue
		}
		sort.Slice(s.Agents, func(i, j int) bool { return s.Agents[i].Name < s.Agents[j].Name })
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Queue < out[j].Queue })
	return out, nil
}

// waiting reports whether no job of an unfinished build is on an agent:
// it is queued behind the bootstrap or the GPU queue.
func waiting(b *Build) bool {
	if b.Finished() {
		return false
	}
	for _, j := range b.Jobs {
		if slices.Contains([]string{"assigned", "accepted", "running", "canceling", "timing_out"}, j.State) {
			return false
		}
	}
	return true
}

// agentTags is an agent's meta_data as a map (a tag without "=" is left
// out; the agent host chose these, so bounded by the list's own size).
func agentTags(meta []string) map[string]string {
	out := map[string]string{}
	for _, m := range meta {
		if k, v, ok := strings.Cut(m, "="); ok {
			out[k] = v
		}
	}
	return out
}

func agentQueue(meta []string) string {
	for _, m := range meta {
		if v, ok := strings.CutPrefix(m, "queue="); ok && v != "" {
			return v
		}
	}
	return DefaultQueue
}

func (c *Client) listAgents(ctx context.Context) ([]buildkite.Agent, error) {
	var out []buildkite.Agent
	opt := &buildkite.AgentListOptions{ListOptions: buildkite.ListOptions{PerPage: 100, Page: 1}}
	for page := 0; page < 100; page++ {
		as, resp, err := c.bk.Agents.List(ctx, c.opts.Org, opt)
		if err != nil {
			return nil, fmt.Errorf("listing agents: %w", c.scrub(err))
		}
		out = append(out, as...)
		if resp == nil || resp.NextPage == 0 || len(as) == 0 {
			break
		}
		opt.Page = resp.NextPage
	}
	return out, nil
}

// WriteQueueTable writes queues as `kbgen queues` shows them: a row a
// queue (agents, idle, busy, waiting builds, agent versions, agent names
// with busy ones starred), then the legend.
func WriteQueueTable(w io.Writer, qs []QueueStatus) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "QUEUE\tAGENTS\tIDLE\tBUSY\tWAITING\tVERSIONS\tAGENT NAMES")
	for _, q := range qs {
		versions := map[string]bool{}
		var names []string
		for _, a := range q.Agents {
			versions[a.Version] = true
			names = append(names, a.Name+agentMark(a))
		}
		vs := slices.Sorted(maps.Keys(versions))
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t%s\n", q.Queue, q.Total, q.Idle, q.Busy, q.Waiting, dash(strings.Join(vs, ",")), dash(strings.Join(names, ", ")))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(qs) > 0 {
		_, err := fmt.Fprintln(w, "(* busy; WAITING: builds submitted to the queue that no agent runs yet)")
		return err
	}
	return nil
}

// agentMark is how the table marks a busy or a paused agent.
func agentMark(a Agent) string {
	switch {
	case a.Busy:
		return "*"
	case a.Paused:
		return " (paused)"
	}
	return ""
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
