package fakebuildkite

import (
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Options configure a live server (NewLive): one where builds really run,
// on real `buildkite-agent start` processes that take jobs from its Agent
// API, instead of following a Script.
type Options struct {
	// Pipeline is the pipeline's own steps (YAML, its settings steps
	// until SetPipelineSettings replaces them), run when a build is
	// created, with the build's env interpolated as Buildkite's
	// `pipeline upload` of .buildkite/pipeline.yml would. Default: the
	// file .buildkite/pipeline.yml of Repo (a local path).
	Pipeline []byte
	// Repo is BUILDKITE_REPO of every job: the agent checks it out. A
	// local path or file:// URL works with a stock agent.
	Repo string
	// AgentToken is the registration token agents start with. Default
	// "bkagent_local".
	AgentToken string
	// LostAfter is how long an agent may go without a heartbeat or ping
	// before it is marked lost and its job finishes with exit -1.
	// Default 5 s (Buildkite waits minutes; tests cannot).
	LostAfter time.Duration
	// Minute is how long a timeout_in_minutes minute lasts. Default one
	// minute; tests shrink it to see a step time out.
	Minute time.Duration
	// RewriteUpload, when set, plays a compromised Buildkite: it gets each
	// pipeline an agent uploads (the JSON the agent sent, after signing)
	// and returns the pipeline to schedule instead.
	RewriteUpload func(pipeline []byte) []byte
	// Listen and AgentListen are the REST API's and the Agent API's
	// addresses (host:port); "" takes a free loopback port. An operator's
	// rehearsal (kbgen-e2e buildkite) names them so that agent configs and
	// exported URLs stay valid across restarts.
	Listen, AgentListen string
}

// DefaultAgentToken is the registration token of a live server whose
// Options name none.
const DefaultAgentToken = "bkagent_local"

// live is the state of a live server; Server.mu guards all of it.
type live struct {
	opts   Options
	agents map[string]*liveAgent // by access token
	jobs   []*liveJob            // every job of every build, in creation order
	byID   map[string]*liveJob
	arts   map[string]*liveArtifact // by id
	nextAg int
	stop   chan struct{}
}

type liveAgent struct {
	id, name, token, queue string
	version                string // as the agent registered
	tags                   []string
	state                  string // connected, disconnected, lost
	lastSeen               time.Time
	job                    *liveJob
}

type liveBuild struct {
	id        string
	order     []*liveJob // step order (a retry takes its original's place)
	state     string
	started   time.Time
	finished  time.Time
	canceling bool
	metaData  map[string]string
	notes     map[string]Annotation
	uploads   map[string]bool
}

// Annotation is one build annotation.
type Annotation struct {
	Context, Style, Body string
}

type liveJob struct {
	id    string
	b     *build
	spec  stepSpec
	deps  []*liveJob // jobs that must pass first (follow retriedBy)
	state string     // waiting, scheduled, assigned, accepted, running, canceling, passed, failed, canceled, timed_out, broken
	exit  *int
	agent *liveAgent
	// agentName stays after the agent is gone, for the REST view.
	agentName                   string
	retried                     bool
	retriedBy                   *liveJob
	retries                     []int // per retry rule, attempts used
	attempt                     int
	timedOut                    bool
	signal, signalReason        string
	created, runnable           time.Time
	accepted, started, finished time.Time
	log                         strings.Builder
	headerTimes                 map[string]string
}

type liveArtifact struct {
	id, jobID, path, batch string
	size                   int64
	state                  string
	content                []byte
}

// NewLive starts a live server: the REST API and storage of New, plus an
// Agent API v3 (AgentEndpoint) that real agents register with. Builds
// created through REST run the pipeline's steps on agents of their queue.
func NewLive(opts Options) (*Server, error) {
	if opts.Pipeline == nil {
		if opts.Repo == "" {
			return nil, fmt.Errorf("fakebuildkite: Options need Pipeline or Repo")
		}
		b, err := os.ReadFile(filepath.Join(strings.TrimPrefix(opts.Repo, "file://"), ".buildkite", "pipeline.yml"))
		if err != nil {
			return nil, fmt.Errorf("fakebuildkite: the pipeline's steps: %w", err)
		}
		opts.Pipeline = b
	}
	if _, err := parseSteps(opts.Pipeline, map[string]string{}); err != nil {
		return nil, fmt.Errorf("fakebuildkite: %w", err)
	}
	if opts.AgentToken == "" {
		opts.AgentToken = DefaultAgentToken
	}
	if opts.LostAfter == 0 {
		opts.LostAfter = 5 * time.Second
	}
	if opts.Minute == 0 {
		opts.Minute = time.Minute
	}
	apiLn, agentLn, err := listeners(opts.Listen, opts.AgentListen)
	if err != nil {
		return nil, err
	}
	s := newServer(nil, apiLn)
	// The steps builds start from are the pipeline's settings steps.
	s.settings.Configuration = string(opts.Pipeline)
	s.live = &live{opts: opts, agents: map[string]*liveAgent{}, byID: map[string]*liveJob{}, arts: map[string]*liveArtifact{}, stop: make(chan struct{})}
	s.Agent = serveOn(agentLn, s.agentHandler())
	go s.watch()
	return s, nil
}

// listeners opens the named addresses; nil for "".
func listeners(api, agent string) (apiLn, agentLn net.Listener, err error) {
	if api != "" {
		if apiLn, err = net.Listen("tcp", api); err != nil {
			return nil, nil, fmt.Errorf("fakebuildkite: REST API: %w", err)
		}
	}
	if agent != "" {
		if agentLn, err = net.Listen("tcp", agent); err != nil {
			if apiLn != nil {
				apiLn.Close()
			}
			return nil, nil, fmt.Errorf("fakebuildkite: Agent API: %w", err)
		}
	}
	return apiLn, agentLn, nil
}

// AgentEndpoint is what `buildkite-agent start --endpoint` takes (live
// servers only).
func (s *Server) AgentEndpoint() string { return s.Agent.URL + "/v3" }

// AgentToken is the registration token agents start with.
func (s *Server) AgentToken() string { return s.live.opts.AgentToken }

func (s *Server) closeLive() {
	if s.live == nil {
		return
	}
	close(s.live.stop)
	s.Agent.Close()
}

// watch marks agents lost and times jobs out between requests.
func (s *Server) watch() {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-s.live.stop:
			return
		case <-t.C:
			s.mu.Lock()
			s.sweepLocked(time.Now())
			s.mu.Unlock()
		}
	}
}

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// startLiveLocked gives a new build its id and the pipeline's steps.
func (s *Server) startLiveLocked(b *build) error {
	lb := &liveBuild{id: newUUID(), state: "scheduled", metaData: map[string]string{}, notes: map[string]Annotation{}, uploads: map[string]bool{}}
	for k, v := range b.body.MetaData {
		lb.metaData[k] = v
	}
	b.live = lb
	env := map[string]string{}
	for k, v := range s.buildEnv(b) {
		env[k] = v
	}
	// A build starts from the pipeline's settings steps as they are
	// now (SetPipelineSettings changes them, as an edit in the UI does).
	specs, err := parseSteps([]byte(s.settings.Configuration), env)
	if err != nil {
		return err
	}
	s.insertLocked(b, nil, specs, time.Now())
	return nil
}

// buildEnv is what every job of the build sees before its step's env.
func (s *Server) buildEnv(b *build) map[string]string {
	env := map[string]string{
		"BUILDKITE":                         "true",
		"CI":                                "true",
		"BUILDKITE_BUILD_ID":                b.live.id,
		"BUILDKITE_BUILD_NUMBER":            strconv.Itoa(b.number),
		"BUILDKITE_BUILD_URL":               fmt.Sprintf("https://buildkite.com/%s/%s/builds/%d", s.Org, s.Pipeline, b.number),
		"BUILDKITE_ORGANIZATION_SLUG":       s.Org,
		"BUILDKITE_PIPELINE_SLUG":           s.Pipeline,
		"BUILDKITE_PIPELINE_PROVIDER":       "git",
		"BUILDKITE_PIPELINE_DEFAULT_BRANCH": "main",
		"BUILDKITE_REPO":                    s.live.opts.Repo,
		"BUILDKITE_BRANCH":                  b.body.Branch,
		"BUILDKITE_COMMIT":                  b.body.Commit,
		"BUILDKITE_MESSAGE":                 b.body.Message,
		"BUILDKITE_SOURCE":                  "api",
		"BUILDKITE_BUILD_CREATOR":           "kbgen",
	}
	for k, v := range b.body.Env {
		env[k] = v
	}
	return env
}

// insertLocked adds steps to build b after the job that uploaded them
// (after: nil for the pipeline's own steps).
func (s *Server) insertLocked(b *build, after *liveJob, specs []stepSpec, now time.Time) {
	lb := b.live
	pos := len(lb.order)
	for i, j := range lb.order {
		if j == after {
			pos = i + 1
		}
	}
	before := append([]*liveJob(nil), lb.order[:pos]...)
	var added []*liveJob
	for _, sp := range specs {
		j := &liveJob{id: newUUID(), b: b, spec: sp, state: "waiting", created: now, retries: make([]int, len(sp.retry))}
		if sp.afterWait {
			j.deps = append(j.deps, before...)
			j.deps = append(j.deps, added...)
		}
		for _, key := range sp.dependsOn {
			for _, o := range append(append([]*liveJob(nil), lb.order...), added...) {
				if o.spec.key == key {
					j.deps = append(j.deps, o)
				}
			}
		}
		added = append(added, j)
		s.live.byID[j.id] = j
		s.live.jobs = append(s.live.jobs, j)
	}
	lb.order = append(append(append([]*liveJob(nil), lb.order[:pos]...), added...), lb.order[pos:]...)
	s.advanceLocked(b, now)
}

// latest follows a job to its last retry.
func latest(j *liveJob) *liveJob {
	for j.retriedBy != nil {
		j = j.retriedBy
	}
	return j
}

func terminal(state string) bool {
	switch state {
	case "passed", "failed", "canceled", "timed_out", "broken", "expired":
		return true
	}
	return false
}

// advanceLocked makes waiting jobs runnable (or broken) and settles the
// build's state.
func (s *Server) advanceLocked(b *build, now time.Time) {
	lb := b.live
	for changed := true; changed; {
		changed = false
		for _, j := range lb.order {
			if j.state != "waiting" {
				continue
			}
			ready, broken := true, false
			for _, d := range j.deps {
				d = latest(d)
				switch {
				case d.state == "passed":
				case terminal(d.state):
					broken = true
				default:
					ready = false
				}
			}
			switch {
			case lb.canceling:
				j.state, j.finished = "canceled", now
				changed = true
			case broken:
				j.state, j.finished = "broken", now
				changed = true
			case ready:
				j.state, j.runnable = "scheduled", now
				changed = true
			}
		}
	}
	s.settleLocked(b, now)
}

// settleLocked sets the build state from its jobs.
func (s *Server) settleLocked(b *build, now time.Time) {
	lb := b.live
	if terminal(lb.state) {
		return
	}
	done, failed, started := true, false, false
	for _, j := range lb.order {
		j = latest(j)
		if !terminal(j.state) {
			done = false
		}
		if j.state == "failed" || j.state == "timed_out" || j.state == "canceled" {
			failed = true
		}
		if !j.accepted.IsZero() {
			started = true
		}
	}
	if started && lb.started.IsZero() {
		lb.started = now
	}
	switch {
	case done && lb.canceling:
		lb.state, lb.finished = "canceled", now
	case done && failed:
		lb.state, lb.finished = "failed", now
	case done:
		lb.state, lb.finished = "passed", now
	case lb.canceling:
		lb.state = "canceling"
	case failed:
		lb.state = "failing"
	case started:
		lb.state = "running"
	}
}

// cancelLiveLocked cancels a build: jobs not yet on an agent end at once,
// running ones go canceling until their agent finishes them.
func (s *Server) cancelLiveLocked(b *build, now time.Time) {
	lb := b.live
	if terminal(lb.state) {
		return
	}
	lb.canceling = true
	for _, j := range lb.order {
		s.cancelJobLocked(latest(j), now)
	}
	s.advanceLocked(b, now)
}

func (s *Server) cancelJobLocked(j *liveJob, now time.Time) {
	switch j.state {
	case "waiting", "scheduled", "assigned":
		if j.agent != nil {
			j.agent.job = nil
			j.agent = nil
		}
		j.state, j.finished = "canceled", now
	case "accepted", "running":
		j.state = "canceling"
	}
}

// finishJobLocked ends a job with an exit status, signal and signal
// reason, retrying it as Buildkite does (buildkite/docs
// pages/pipelines/configure/retry.md): the first retry.automatic rule
// that matches decides, and retries only while its own count is under its
// limit; a failed or timed-out job can be retried, a canceled one or any
// job of a canceled build never.
func (s *Server) finishJobLocked(j *liveJob, exit int, signal, reason string, now time.Time) {
	if j.agent != nil {
		j.agent.job = nil
		j.agent = nil
	}
	j.exit, j.finished, j.signal, j.signalReason = &exit, now, signal, reason
	switch {
	case j.state == "canceling" && j.timedOut:
		j.state = "timed_out"
	case j.state == "canceling":
		j.state = "canceled"
	case exit == 0:
		j.state = "passed"
	default:
		j.state = "failed"
	}
	if (j.state == "failed" || j.state == "timed_out") && !j.b.live.canceling {
		if rule, ok := retryBy(j.spec.retry, j.retries, exit, signal, reason); ok {
			s.retryLocked(j, rule, now)
		}
	}
	s.advanceLocked(j.b, now)
}

func (s *Server) retryLocked(j *liveJob, rule int, now time.Time) {
	n := &liveJob{id: newUUID(), b: j.b, spec: j.spec, deps: j.deps, state: "scheduled", created: now, runnable: now,
		retries: append([]int(nil), j.retries...), attempt: j.attempt + 1}
	n.retries[rule]++
	j.retried, j.retriedBy = true, n
	s.live.byID[n.id] = n
	s.live.jobs = append(s.live.jobs, n)
}

// sweepLocked marks agents lost and times out running jobs.
func (s *Server) sweepLocked(now time.Time) {
	for _, a := range s.live.agents {
		if a.state == "connected" && now.Sub(a.lastSeen) > s.live.opts.LostAfter {
			a.state = "lost"
			if j := a.job; j != nil {
				if j.state == "assigned" {
					// Never accepted: another agent may take it.
					j.state, j.agent = "scheduled", nil
					a.job = nil
				} else {
					// Buildkite ends the job -1 with no signal reason
					// (retry.md: "-1 … when an agent is lost"; no
					// signal_reason value names a lost agent).
					fmt.Fprintf(&j.log, "\n~~~ Agent %s lost (no heartbeat for %s): exit -1\n", a.name, s.live.opts.LostAfter)
					s.finishJobLocked(j, -1, "", "", now)
				}
			}
		}
	}
	for _, j := range s.live.jobs {
		if j.spec.timeoutMinutes > 0 && (j.state == "running" || j.state == "accepted") && !j.started.IsZero() &&
			now.Sub(j.started) > time.Duration(j.spec.timeoutMinutes)*s.live.opts.Minute {
			j.state, j.timedOut = "canceling", true
		}
	}
}

// nextJobLocked picks the job agent a runs next: a scheduled job of its
// queue, highest priority first, then the longest waiting.
func (s *Server) nextJobLocked(a *liveAgent) *liveJob {
	var best *liveJob
	for _, j := range s.live.jobs {
		if j.state != "scheduled" || j.spec.queue != a.queue {
			continue
		}
		if best == nil || j.spec.priority > best.spec.priority ||
			(j.spec.priority == best.spec.priority && j.runnable.Before(best.runnable)) {
			best = j
		}
	}
	return best
}

// jobEnv is the env an agent gets for job j.
func (s *Server) jobEnv(j *liveJob, a *liveAgent) map[string]string {
	env := s.buildEnv(j.b)
	for k, v := range j.spec.env {
		env[k] = v
	}
	env["BUILDKITE_JOB_ID"] = j.id
	env["BUILDKITE_STEP_ID"] = j.id
	env["BUILDKITE_STEP_KEY"] = j.spec.key
	env["BUILDKITE_LABEL"] = j.spec.label
	env["BUILDKITE_COMMAND"] = j.spec.command
	env["BUILDKITE_SCRIPT_PATH"] = j.spec.command
	env["BUILDKITE_RETRY_COUNT"] = strconv.Itoa(j.attempt)
	env["BUILDKITE_AGENT_ID"] = a.id
	env["BUILDKITE_AGENT_NAME"] = a.name
	env["BUILDKITE_ARTIFACT_PATHS"] = strings.Join(j.spec.artifactPaths, ";")
	if j.spec.plugins != "" {
		env["BUILDKITE_PLUGINS"] = j.spec.plugins
	}
	if j.spec.timeoutMinutes > 0 {
		env["BUILDKITE_TIMEOUT"] = strconv.Itoa(j.spec.timeoutMinutes)
	} else {
		env["BUILDKITE_TIMEOUT"] = "false"
	}
	for _, t := range a.tags {
		if k, v, ok := strings.Cut(t, "="); ok {
			env["BUILDKITE_AGENT_META_DATA_"+strings.ToUpper(strings.ReplaceAll(k, "-", "_"))] = v
		}
	}
	return env
}

// JobInfo is one job of a live build, for tests.
type JobInfo struct {
	ID, Key, Label, Queue, State, Agent, Signal, SignalReason string
	Exit                                                      *int
	Retried                                                   bool
	Accepted, Started, Finished                               time.Time
	Log                                                       string
	HeaderTimes                                               map[string]string
}

// Jobs lists the jobs of live build number in step order, each retry
// after the job it retried.
func (s *Server) Jobs(number int) []JobInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.builds[number]
	if b == nil || b.live == nil {
		return nil
	}
	var out []JobInfo
	for _, j := range b.live.order {
		for ; j != nil; j = j.retriedBy {
			out = append(out, j.info())
		}
	}
	return out
}

// AllJobs lists every job of every live build in the order they were made.
func (s *Server) AllJobs() []JobInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.live == nil {
		return nil
	}
	out := make([]JobInfo, 0, len(s.live.jobs))
	for _, j := range s.live.jobs {
		out = append(out, j.info())
	}
	return out
}

func (j *liveJob) info() JobInfo {
	ht := map[string]string{}
	for k, v := range j.headerTimes {
		ht[k] = v
	}
	return JobInfo{ID: j.id, Key: j.spec.key, Label: j.spec.label, Queue: j.spec.queue, State: j.state, Agent: j.agentName,
		Signal: j.signal, SignalReason: j.signalReason, Exit: j.exit, Retried: j.retried, Accepted: j.accepted, Started: j.started,
		Finished: j.finished, Log: j.log.String(), HeaderTimes: ht}
}

// Annotations returns build number's annotations by context.
func (s *Server) Annotations(number int) map[string]Annotation {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.builds[number]
	if b == nil || b.live == nil {
		return nil
	}
	out := map[string]Annotation{}
	for k, v := range b.live.notes {
		out[k] = v
	}
	return out
}

// AgentInfo is one registered agent, for tests.
type AgentInfo struct {
	Name, Queue, State string
	Busy               bool
}

// Agents lists the registered agents by name.
func (s *Server) Agents() []AgentInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.live == nil {
		return nil
	}
	var out []AgentInfo
	for _, a := range s.live.agents {
		out = append(out, AgentInfo{Name: a.name, Queue: a.queue, State: a.state, Busy: a.job != nil})
	}
	sort.Slice(out, func(i, k int) bool { return out[i].Name < out[k].Name })
	return out
}
