package dashboard

import (
	"fmt"
	"html/template"
	"io"
	"math"
	"sort"
	"strings"
	"time"
)

// Page is what the dashboard shows; serve fills it for one scope.
type Page struct {
	Scope    Scope
	AsOf     time.Time
	Queues   []Queue
	Nodes    []Node
	InFlight []Run
	// Budget is the API budget; nil for a vendor's scope (it is kbgen's
	// own business).
	Budget *Budget
	// Alerts are the open alerts; AlertsOff says why there are none to
	// show when alerting is not set up.
	Alerts    []Alert
	AlertsOff string
}

// Queue is one queue's line.
type Queue struct {
	Name                                string
	Queued, Waiting, Scheduled, Running int
	WaitP50, WaitP95                    time.Duration // 0: no wait seen
	Waits                               int           // how many waits the percentiles are of
	Agents, Idle, Busy, Paused, Lost    int
	OldestScheduled                     time.Duration
}

// Node is one host and its agents.
type Node struct {
	Name   string
	Agents []Agent
}

// Agent is one agent's line.
type Agent struct {
	Name, Queue, GPU, State string
	LastJob                 time.Time
	Runs                    int
	NoisyRate, FaultRate    float64 // of Runs, 0..1
	Note                    string  // why paused or lost
	// Canary is its canary series; nil: canaries off, or none yet.
	Canary *Canary
}

// Run is one run in flight.
type Run struct {
	ID, Queue, State string
	Build            int
	URL              string
	Age              time.Duration
}

// Budget is the REST budget by scope.
type Budget struct {
	Limit, Used   int
	OrgRemaining  int   // -1: not known
	UserRemaining []int // per token; -1: not known
}

// Alert is one open alert.
type Alert struct {
	ID, Name, Severity, Summary string
	Since                       time.Time
}

// Percentile is the p-th percentile (0..100) of ds by nearest rank; 0
// for none.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	k := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[min(max(k, 0), len(s)-1)]
}

// Render writes the page: one HTML document, nothing fetched.
func Render(w io.Writer, p Page) error {
	return pageTmpl.Execute(w, p)
}

// RenderLogin writes the login form, with msg (a failed login) if any.
func RenderLogin(w io.Writer, msg string) error {
	return loginTmpl.Execute(w, msg)
}

var funcs = template.FuncMap{
	"dur": func(d time.Duration) string {
		switch {
		case d <= 0:
			return "—"
		case d < time.Second:
			return d.Round(time.Millisecond).String()
		case d < time.Hour:
			return d.Round(time.Second).String()
		}
		return d.Round(time.Minute).String()
	},
	"ago": func(t, now time.Time) string {
		if t.IsZero() {
			return "never"
		}
		return now.Sub(t).Round(time.Second).String() + " ago"
	},
	"pct":       func(f float64) string { return fmt.Sprintf("%.0f %%", 100*f) },
	"signedpct": func(f float64) string { return fmt.Sprintf("%+.1f %%", 100*f) },
	"left": func(n int) string {
		if n < 0 {
			return "not known yet"
		}
		return fmt.Sprint(n)
	},
	"bar":   bar,
	"spark": func(c *Canary) template.HTML { return spark(*c) },
	"lower": strings.ToLower,
	"utc":   func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") },
}

// bar is an inline SVG bar of used out of limit: the budget at a glance,
// drawn without a script.
func bar(used, limit int) template.HTML {
	w := 0.0
	if limit > 0 {
		w = math.Min(1, float64(used)/float64(limit)) * 200
	}
	return template.HTML(fmt.Sprintf(`<svg class="bar" width="200" height="12" role="img" aria-label="%d of %d used"><rect width="200" height="12" fill="#e5e7eb"/><rect width="%.0f" height="12" fill="#2563eb"/></svg>`, used, limit, w)) // numbers only: no caller text
}

const style = `body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#111}h1{font-size:1.4em}h2{font-size:1.1em;margin-top:1.6em}
table{border-collapse:collapse;margin:.4em 0}th,td{border-bottom:1px solid #ddd;padding:.25em .7em;text-align:left}th{background:#f3f4f6}
.n{text-align:right}.idle{color:#15803d}.busy{color:#1d4ed8}.paused{color:#b45309}.lost{color:#b91c1c;font-weight:bold}.muted{color:#6b7280}.drift{color:#b91c1c;font-weight:bold}.spark{vertical-align:middle}`

var pageTmpl = template.Must(template.New("page").Funcs(funcs).Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
<title>kbgen fleet{{if not .Scope.All}} · {{.Scope.Name}}{{end}}</title>
<style>` + style + `</style></head><body>
<h1>kbgen fleet{{if not .Scope.All}} · {{.Scope.Name}}{{end}}</h1>
<p class="muted" id="asof">as of {{utc .AsOf}}</p>
<form method="post" action="/dashboard/logout"><button type="submit">Log out</button></form>

<h2>Queues</h2>
<table id="queues"><tr><th>queue</th><th class="n">queued</th><th class="n">waiting</th><th class="n">scheduled</th><th class="n">running</th><th class="n">oldest scheduled</th><th class="n">wait p50</th><th class="n">wait p95</th><th class="n">agents</th><th class="n">idle</th><th class="n">busy</th><th class="n">paused</th><th class="n">lost</th></tr>
{{range .Queues}}<tr data-queue="{{.Name}}"><td>{{.Name}}</td><td class="n">{{.Queued}}</td><td class="n">{{.Waiting}}</td><td class="n">{{.Scheduled}}</td><td class="n">{{.Running}}</td><td class="n">{{dur .OldestScheduled}}</td><td class="n">{{dur .WaitP50}}</td><td class="n">{{dur .WaitP95}}</td><td class="n">{{.Agents}}</td><td class="n">{{.Idle}}</td><td class="n">{{.Busy}}</td><td class="n">{{.Paused}}</td><td class="n">{{.Lost}}</td></tr>
{{else}}<tr><td colspan="13" class="muted">no queue yet</td></tr>{{end}}</table>

<h2>Agents by node</h2>
{{range .Nodes}}<h3>{{.Name}}</h3>
<table class="agents"><tr><th>agent</th><th>queue</th><th>GPU</th><th>state</th><th>last job</th><th class="n">runs</th><th class="n">noisy</th><th class="n">faults</th><th>canary</th><th>note</th></tr>
{{range .Agents}}<tr data-agent="{{.Name}}"><td>{{.Name}}</td><td>{{.Queue}}</td><td>{{.GPU}}</td><td class="{{lower .State}}">{{.State}}</td><td>{{ago .LastJob $.AsOf}}</td><td class="n">{{.Runs}}</td><td class="n">{{pct .NoisyRate}}</td><td class="n">{{pct .FaultRate}}</td><td class="canary">{{with .Canary}}{{spark .}} <span class="{{lower .State}}">{{.State}}</span>{{if .Off}} <span class="drift">offset {{signedpct .Offset}}</span>{{end}}{{else}}<span class="muted">—</span>{{end}}</td><td>{{.Note}}</td></tr>
{{end}}</table>
{{else}}<p class="muted">no agent seen yet</p>{{end}}

<h2>Runs in flight</h2>
<table id="inflight"><tr><th>run</th><th>queue</th><th>state</th><th>build</th><th class="n">age</th></tr>
{{range .InFlight}}<tr><td>{{.ID}}</td><td>{{.Queue}}</td><td>{{.State}}</td><td>{{if .URL}}<a href="{{.URL}}">{{.Build}}</a>{{else}}—{{end}}</td><td class="n">{{dur .Age}}</td></tr>
{{else}}<tr><td colspan="5" class="muted">none</td></tr>{{end}}</table>

{{with .Budget}}<h2>API budget</h2>
<table id="budget"><tr><th>scope</th><th>used / limit (61 s)</th><th>Buildkite says left</th></tr>
<tr><td>kbgen</td><td>{{bar .Used .Limit}} {{.Used}} / {{.Limit}}</td><td>—</td></tr>
<tr><td>organization (rest)</td><td></td><td>{{left .OrgRemaining}}</td></tr>
{{range $i, $u := .UserRemaining}}<tr><td>token {{$i}} (rest_user)</td><td></td><td>{{left $u}}</td></tr>{{end}}
</table>{{end}}

<h2>Open alerts</h2>
{{if .Alerts}}<table id="alerts"><tr><th>alert</th><th>severity</th><th>since</th><th>summary</th></tr>
{{range .Alerts}}<tr><td>{{.Name}}</td><td>{{.Severity}}</td><td>{{utc .Since}}</td><td>{{.Summary}}</td></tr>{{end}}</table>
{{else}}<p class="muted" id="alerts">{{if .AlertsOff}}{{.AlertsOff}}{{else}}none open{{end}}</p>{{end}}
</body></html>
`))

var loginTmpl = template.Must(template.New("login").Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>kbgen fleet · log in</title><style>` + style + `</style></head><body>
<h1>kbgen fleet</h1>
{{if .}}<p class="lost">{{.}}</p>{{end}}
<form method="post" action="/dashboard/login">
<label>View token <input type="password" name="token" autocomplete="current-password" required></label>
<button type="submit">Log in</button>
</form></body></html>
`))
