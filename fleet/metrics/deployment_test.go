package metrics

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

const (
	grafanaFile = "../../deployment/grafana/kbgen.json"
	rulesDir    = "../../deployment/prometheus"
)

// emitted is every series name a fed recorder exposes, histograms with
// their _bucket, _sum and _count.
func emitted(t *testing.T) map[string]bool {
	t.Helper()
	mfs, err := fed(t).Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, mf := range mfs {
		n := mf.GetName()
		out[n] = true
		if mf.GetType().String() == "HISTOGRAM" {
			out[n+"_bucket"], out[n+"_sum"], out[n+"_count"] = true, true, true
		}
	}
	return out
}

// promqlWords are PromQL's functions, aggregations and keywords: what in
// an expression is not a series name.
var promqlWords = map[string]bool{}

func init() {
	for _, w := range strings.Fields(`sum min max avg count stddev stdvar topk bottomk quantile count_values group
		rate irate increase delta idelta deriv predict_linear histogram_quantile clamp_min clamp_max clamp abs ceil floor round
		label_replace label_join label_values vector scalar time timestamp absent absent_over_time sort sort_desc
		avg_over_time min_over_time max_over_time sum_over_time count_over_time last_over_time changes resets
		and or unless by without on ignoring group_left group_right bool offset inf nan humanizeDuration`) {
		promqlWords[w] = true
	}
}

var (
	stripStrings  = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)
	stripMatchers = regexp.MustCompile(`\{[^}]*\}|\[[^\]]*\]`)
	stripGrouping = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	stripVars     = regexp.MustCompile(`\$\{?\w+\}?`)
	identifier    = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*`)
	labelValues   = regexp.MustCompile(`label_values\(([^,()]+(?:\{[^}]*\})?)\s*,\s*\w+\s*\)`)
	number        = regexp.MustCompile(`\b\d+(\.\d+)?([eE][-+]?\d+)?[smhdwy]?\b`)
)

// seriesIn is the series names an expression reads.
func seriesIn(expr string) []string {
	e := labelValues.ReplaceAllString(expr, "$1") // Grafana's label_values(series, label)
	e = stripStrings.ReplaceAllString(e, " ")
	e = stripVars.ReplaceAllString(e, " ")
	e = stripMatchers.ReplaceAllString(e, " ")
	e = stripGrouping.ReplaceAllString(e, " ")
	e = number.ReplaceAllString(e, " ")
	var out []string
	for _, id := range identifier.FindAllString(e, -1) {
		if !promqlWords[id] && !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}

func TestSeriesIn(t *testing.T) {
	t.Parallel()
	for expr, want := range map[string]string{
		`histogram_quantile(0.95, sum by (queue, le) (rate(kbgen_queue_wait_seconds_bucket{queue=~"$queue"}[$__rate_interval])))`: "kbgen_queue_wait_seconds_bucket",
		`DCGM_FI_DEV_GPU_TEMP * on (UUID) group_left (agent) kbgen_agent_info`:                                                    "DCGM_FI_DEV_GPU_TEMP kbgen_agent_info",
		`rate(node_cpu_seconds_total{mode="idle"}[5m]) > 0.5`:                                                                     "node_cpu_seconds_total",
		`label_values(kbgen_jobs, queue)`:                                                                                         "kbgen_jobs",
	} {
		if got := strings.Join(seriesIn(expr), " "); got != want {
			t.Errorf("seriesIn(%s) = %q, want %q", expr, got, want)
		}
	}
}

// grafanaExprs is every query of the dashboard: panel targets and
// template variables.
func grafanaExprs(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(grafanaFile)
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatalf("%s: %v", grafanaFile, err)
	}
	var out []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if s, ok := x.(string); ok && (k == "expr" || k == "definition") {
					out = append(out, s)
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(doc)
	return out
}

// TestGrafanaQueries: every query of deployment/grafana/kbgen.json names
// series, and only series kbgen emits.
func TestGrafanaQueries(t *testing.T) {
	t.Parallel()
	known := emitted(t)
	exprs := grafanaExprs(t)
	if len(exprs) < 10 {
		t.Fatalf("%d queries found in %s", len(exprs), grafanaFile)
	}
	for _, e := range exprs {
		names := seriesIn(e)
		if len(names) == 0 {
			t.Errorf("query names no series: %s", e)
		}
		for _, n := range names {
			if !known[n] {
				t.Errorf("query reads %s, which kbgen does not emit: %s", n, e)
			}
		}
	}
}

// TestAlertRules: the alert rules read only kbgen's series, promtool
// accepts them, and their unit tests pass (promtool test rules).
func TestAlertRules(t *testing.T) {
	t.Parallel()
	known := emitted(t)
	data, err := os.ReadFile(filepath.Join(rulesDir, "kbgen-rules.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert, Expr string
			}
		}
	}
	if err := yaml.Unmarshal(data, &rules); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			n++
			for _, s := range seriesIn(r.Expr) {
				if !known[s] {
					t.Errorf("%s reads %s, which kbgen does not emit", r.Alert, s)
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("no rules")
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("SKIP: promtool is not installed (Debian: prometheus)")
	}
	for _, args := range [][]string{{"check", "rules", "kbgen-rules.yml"}, {"test", "rules", "kbgen-rules.test.yml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = rulesDir
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out.String())
		}
	}
}
