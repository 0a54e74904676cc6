package deployment

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/fleet/alert"
	"github.com/gpu-mode/kbgen/fleet/metrics"
	"github.com/gpu-mode/kbgen/fleet/runfacts"
	"gopkg.in/yaml.v3"
)

// The dashboard and the rules, as shipped.
const (
	dashboardFile = "grafana/kbgen.json"
	rulesFile     = "prometheus/kbgen-rules.yml"
	rulesTestFile = "prometheus/kbgen-rules.test.yml"
	joinsFile     = "prometheus/kbgen-joins.yml"
	joinsTestFile = "prometheus/kbgen-joins.test.yml"
	alertsExample = "alerts/kbgen-alerts.example.yml"
)

// emitted is every series name kbgen serve's registry exposes once every
// hook has been fed: a histogram's _bucket, _sum and _count; and the
// families by name.
func emitted(t *testing.T) (series map[string]bool, families []string) {
	t.Helper()
	r := metrics.New()
	r.SetSource(func() metrics.Snapshot {
		return metrics.Snapshot{
			Jobs:        []metrics.Job{{Queue: "q", State: metrics.JobScheduled, Runnable: time.Now()}},
			AgentsKnown: true, Agents: []metrics.Agent{{Queue: "q", State: metrics.AgentLost}},
			Budget:   metrics.Budget{Limit: 10, OrgRemaining: 5, UserRemaining: []int{3}},
			Canaries: []metrics.Canary{{Agent: "a", Queue: "q", Drifting: true, Offset: 0.03}},
		}
	})
	fault := 75
	r.RunDone("q", "obtained")
	r.QueueWait("q", time.Second)
	r.Detected(time.Second)
	r.APIRequest("poll", 429, "rest")
	r.Webhook(200)
	r.RunFacts(runfacts.Facts{Agent: "a", Queue: "q", Node: "n", GPUUUIDs: []string{"GPU-1"}, Noise: "noisy", Exit: &fault, Xids: 1, ClockEventSeconds: 1})
	rec := httptest.NewRecorder()
	r.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	series = map[string]bool{}
	// "# TYPE name kind" names each family the scrape carries.
	for _, l := range strings.Split(rec.Body.String(), "\n") {
		f := strings.Fields(l)
		if len(f) != 4 || f[0] != "#" || f[1] != "TYPE" {
			continue
		}
		name := f[2]
		families = append(families, name)
		switch f[3] {
		case "histogram":
			series[name+"_bucket"], series[name+"_sum"], series[name+"_count"] = true, true, true
		case "summary":
			series[name], series[name+"_sum"], series[name+"_count"] = true, true, true
		default:
			series[name] = true
		}
	}
	if len(families) < 10 {
		t.Fatalf("scrape has %d families:\n%s", len(families), rec.Body.String())
	}
	return series, families
}

// PromQL's words that are not series names.
var promqlWords = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true,
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true, "inf": true, "nan": true}

var (
	promqlStrings  = regexp.MustCompile("\"(?:[^\"\\\\]|\\\\.)*\"|'(?:[^'\\\\]|\\\\.)*'|`[^`]*`")
	promqlBraces   = regexp.MustCompile(`\{[^}]*\}|\[[^\]]*\]`)
	promqlGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promqlToken    = regexp.MustCompile(`\$\{?[A-Za-z0-9_:]+\}?|[0-9][0-9A-Za-z_.]*|[A-Za-z_:][A-Za-z0-9_:]*(\s*\()?`)
)

// metricNames is every series name expr selects: identifiers outside
// strings, label matchers, ranges and grouping lists, that are not
// functions, keywords, numbers, durations or Grafana variables.
func metricNames(expr string) []string {
	s := promqlStrings.ReplaceAllString(expr, `""`)
	s = promqlBraces.ReplaceAllString(s, " ")
	s = promqlGrouping.ReplaceAllString(s, " ")
	var out []string
	for _, m := range promqlToken.FindAllString(s, -1) {
		if m[0] == '$' || m[0] >= '0' && m[0] <= '9' || strings.HasSuffix(m, "(") || promqlWords[strings.ToLower(m)] {
			continue
		}
		out = append(out, m)
	}
	return out
}

// TestMetricNames: the extraction finds the series and nothing else, so
// that the checks below can fail.
func TestMetricNames(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{`histogram_quantile(0.95, sum by (queue, le) (rate(kbgen_queue_wait_seconds_bucket{queue=~"$queue"}[$__rate_interval])))`, []string{"kbgen_queue_wait_seconds_bucket"}},
		{`kbgen_api_budget_left == 0 or kbgen_api_rate_limit_remaining == 0`, []string{"kbgen_api_budget_left", "kbgen_api_rate_limit_remaining"}},
		{`a_metric offset 1h / on (gpu_uuid) group_left (agent) b:recorded{x="y}z"}`, []string{"a_metric", "b:recorded"}},
		{`sum without (le) (rate(kbgen_typo_total[5m])) > 1e3`, []string{"kbgen_typo_total"}},
		{`count by (node) (kbgen_agent_info{kbgen_version!~"|dev"}) and on () (count(x) > 1)`, []string{"kbgen_agent_info", "x"}},
		// The fleet branch's TestSeriesIn cases (fleet/metrics, removed).
		{`DCGM_FI_DEV_GPU_TEMP * on (UUID) group_left (agent) kbgen_agent_info`, []string{"DCGM_FI_DEV_GPU_TEMP", "kbgen_agent_info"}},
		{`rate(node_cpu_seconds_total{mode="idle"}[5m]) > 0.5`, []string{"node_cpu_seconds_total"}},
	} {
		if got := metricNames(tc.expr); !slices.Equal(got, tc.want) {
			t.Errorf("metricNames(%s) = %q, want %q", tc.expr, got, tc.want)
		}
	}
}

// dashboard is the parts of a Grafana dashboard that hold queries.
type dashboard struct {
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	Title   string `json:"title"`
	Type    string `json:"type"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a row's
}

// dashboardExprs is every PromQL expression of the dashboard: each
// panel's targets (rows' nested panels too) and each query variable's.
func dashboardExprs(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return append(panelExprs(t, d.Panels), variableExprs(t, d)...)
}

func panelExprs(t *testing.T, ps []panel) []string {
	t.Helper()
	var exprs []string
	for _, p := range ps {
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
		exprs = append(exprs, panelExprs(t, p.Panels)...)
	}
	return exprs
}

// variableExprs is the selector of each query variable's
// label_values(SELECTOR, LABEL).
func variableExprs(t *testing.T, d dashboard) []string {
	t.Helper()
	labelValues := regexp.MustCompile(`^label_values\(\s*(.+?)\s*,\s*[A-Za-z_]+\s*\)$`)
	var exprs []string
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			t.Fatalf("variable query: %v", err)
		}
		m := labelValues.FindStringSubmatch(q.Query)
		if m == nil {
			t.Fatalf("variable query %q: want label_values(SELECTOR, LABEL)", q.Query)
		}
		exprs = append(exprs, m[1])
	}
	return exprs
}

// TestDashboardSeries: every query of the dashboard names only series
// kbgen serve emits, and every family kbgen emits is on it.
func TestDashboardSeries(t *testing.T) {
	t.Parallel()
	series, families := emitted(t)
	used := map[string]bool{}
	for _, e := range dashboardExprs(t) {
		names := metricNames(e)
		if len(names) == 0 {
			t.Errorf("query %q names no series", e)
		}
		for _, n := range names {
			if !series[n] {
				t.Errorf("query %q names %s, which kbgen does not emit", e, n)
			}
			used[strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_sum"), "_count")] = true
		}
	}
	for _, f := range families {
		if !used[f] {
			t.Errorf("series %s is on no panel", f)
		}
	}
}

// rules is the rules file's alerts.
type rule struct {
	Group  string            `yaml:"-"`
	Alert  string            `yaml:"alert"`
	Expr   string            `yaml:"expr"`
	For    string            `yaml:"for"`
	Labels map[string]string `yaml:"labels"`
}

func loadRules(t *testing.T) []rule {
	t.Helper()
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []rule `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	var out []rule
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			r.Group = g.Name
			out = append(out, r)
		}
	}
	return out
}

// serviceGroup is the rules about kbgen serve itself (429s, detection,
// webhooks): Prometheus only, no condition of fleet/alert.
const serviceGroup = "kbgen-service"

// TestRulesMatchAlerts: every rule names only series kbgen emits; each
// of the fleet's is one of kbgen serve's alert conditions and waits its
// duration (those about kbgen serve itself have none); the only
// conditions without a rule are those kbgen emits no series for.
func TestRulesMatchAlerts(t *testing.T) {
	t.Parallel()
	series, _ := emitted(t)
	rules := alert.DefaultRules()
	covered := map[string]bool{}
	for _, r := range loadRules(t) {
		for _, n := range metricNames(r.Expr) {
			if !series[n] {
				t.Errorf("rule %s names %s, which kbgen does not emit", r.Alert, n)
			}
		}
		cond, has := r.Labels["condition"]
		if r.Group == serviceGroup {
			if has {
				t.Errorf("rule %s of %s has condition %q: that group has none of fleet/alert's", r.Alert, serviceGroup, cond)
			}
			continue
		}
		want, ok := rules.For[cond]
		if !ok {
			t.Errorf("rule %s: condition %q is not one of fleet/alert's", r.Alert, cond)
			continue
		}
		covered[cond] = true
		got := time.Duration(0)
		if r.For != "" {
			var err error
			if got, err = time.ParseDuration(r.For); err != nil {
				t.Errorf("rule %s: for %q: %v", r.Alert, r.For, err)
			}
		}
		if got != want {
			t.Errorf("rule %s: for %s, fleet/alert waits %s", r.Alert, got, want)
		}
	}
	var missing []string
	for _, c := range alert.Conditions {
		if !covered[c] {
			missing = append(missing, c)
		}
	}
	if want := []string{alert.ImageNotPrepulled}; !slices.Equal(missing, want) {
		t.Errorf("conditions without a rule %q, want only %q (no series yet)", missing, want)
	}
}

// promtool runs Prometheus' own checker; the test skips, saying so, only
// where it is not installed.
func promtool(t *testing.T, args ...string) {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool is not installed (Debian: prometheus): the rules and queries are not checked by Prometheus")
	}
	cmd := exec.Command(path, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
}

// TestRulesPromtool: promtool accepts the rules and the documented joins,
// and their unit tests pass.
func TestRulesPromtool(t *testing.T) {
	t.Parallel()
	promtool(t, "check", "rules", rulesFile, joinsFile)
	promtool(t, "test", "rules", rulesTestFile, joinsTestFile)
}

// TestJoinsNameKbgenSeries: the joins' kbgen side names series kbgen
// emits (their other side is DCGM's or AMD's).
func TestJoinsNameKbgenSeries(t *testing.T) {
	t.Parallel()
	series, _ := emitted(t)
	b, err := os.ReadFile(joinsFile)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Rules []struct {
				Record string `yaml:"record"`
				Expr   string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			for _, name := range metricNames(r.Expr) {
				if strings.HasPrefix(name, "kbgen_") {
					n++
					if !series[name] {
						t.Errorf("join %s names %s, which kbgen does not emit", r.Record, name)
					}
				}
			}
		}
	}
	if n == 0 {
		t.Error("no join names a kbgen series")
	}
}

// TestAlertsExample: the example alerts config is one kbgen serve takes.
func TestAlertsExample(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(alertsExample)
	if err != nil {
		t.Fatal(err)
	}
	c, err := alert.ParseConfig(b)
	if err != nil {
		t.Fatal(err)
	}
	amd := alert.Alarm{Labels: map[string]string{"queue": "amd-mi300x", "vendor": "AMD"}}
	if got := c.ReceiversFor(amd); !slices.Equal(got, []string{"amd-oncall", "kernelbot-ops"}) {
		t.Errorf("an AMD alarm goes to %q, want amd-oncall and kernelbot-ops", got)
	}
}

// TestDashboardPromQLParses: Prometheus' parser accepts every dashboard
// query (as recording rules, with Grafana's variables filled in).
func TestDashboardPromQLParses(t *testing.T) {
	t.Parallel()
	fill := strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$queue", ".*")
	var f struct {
		Groups []map[string]any `yaml:"groups"`
	}
	var rs []map[string]string
	for i, e := range dashboardExprs(t) {
		rs = append(rs, map[string]string{"record": "kbgen:dashboard_query_" + string(rune('a'+i%26)) + strings.Repeat("x", i/26), "expr": fill.Replace(e)})
	}
	f.Groups = []map[string]any{{"name": "dashboard", "rules": rs}}
	b, err := yaml.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "dashboard-rules.yml")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	promtool(t, "check", "rules", path)
}
