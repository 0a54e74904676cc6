package alert

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestConditions: each condition's findings from facts, by alarm labels;
// the facts just inside each bound give none.
func TestConditions(t *testing.T) {
	t.Parallel()
	agent := func(name string, runs, noisy, faults int, kbgen string) Agent {
		return Agent{Name: name, Queue: "nvidia-h100", Node: "node-" + name, Runs: runs, Noisy: noisy, Faults: faults, Kbgen: kbgen}
	}
	for _, tc := range []struct {
		name string
		f    Facts
		want []string // condition{labels} of each finding
	}{
		{"agent lost", Facts{AgentsKnown: true, Agents: []Agent{{Name: "a0", Queue: "q", Node: "n", Lost: true}, {Name: "a1", Queue: "q"}}},
			[]string{"agent_lost{agent=a0 node=n queue=q}"}},
		{"noisy over half of 4 runs", Facts{RunsKnown: true, Agents: []Agent{agent("a", 4, 3, 0, ""), agent("b", 4, 2, 0, ""), agent("c", 3, 3, 0, "")}},
			[]string{"agent_noisy{agent=a node=node-a queue=nvidia-h100}"}},
		{"two machine faults", Facts{RunsKnown: true, Agents: []Agent{agent("a", 5, 0, 2, ""), agent("b", 5, 0, 1, "")}},
			[]string{"agent_faulting{agent=a node=node-a queue=nvidia-h100}"}},
		{"version skew, one a node", Facts{RunsKnown: true, Generator: "v1.2.0", Agents: []Agent{agent("a", 1, 0, 0, "v1.1.0"), {Name: "a2", Queue: "nvidia-h100", Node: "node-a", Kbgen: "v1.1.0"}, agent("b", 1, 0, 0, "v1.2.0"), agent("c", 1, 0, 0, "dev")}},
			[]string{"version_skew{kbgen_version=v1.1.0 node=node-a queue=nvidia-h100}"}},
		{"one release built twice is no skew", Facts{RunsKnown: true, Generator: "kbgen v1.2.0 (abc, 2026-11-27; go1.26, linux/amd64)", Agents: []Agent{agent("a", 1, 0, 0, "kbgen v1.2.0 (abc, 2026-11-27; go1.26, linux/arm64)"), agent("b", 1, 0, 0, "kbgen v1.1.0 (def, 2026-11-01; go1.26, linux/amd64)"), agent("c", 1, 0, 0, "kbgen dev (unknown commit, unknown date; go1.26, linux/amd64)")}},
			[]string{"version_skew{kbgen_version=v1.1.0 node=node-b queue=nvidia-h100}"}},
		{"a dev generator compares nothing", Facts{RunsKnown: true, Generator: "kbgen dev (unknown commit, unknown date; go1.26, linux/amd64)", Agents: []Agent{agent("a", 1, 0, 0, "v1.1.0")}}, nil},
		// The canary rule's verdicts, not a bound of the alerts' own: a
		// 3 % drift the rule calls drift fires, a 9 % offset within a
		// wider --canary-floor (Off false) does not.
		{"canary drift or offset", Facts{CanariesKnown: true, Canaries: []Canary{{Queue: "q", Agent: "a", Drifting: true, Drift: 0.03}, {Queue: "q", Agent: "b", Off: true, Offset: -0.025}, {Queue: "q", Agent: "c", Drift: 0, Offset: -0.09}}},
			[]string{"canary_drift{agent=a queue=q}", "canary_drift{agent=b queue=q}"}},
		{"image not pulled", Facts{ImagesKnown: true, Images: []Image{{Node: "n1", Queue: "q", Image: "ghcr.io/x/y@sha256:ab", Pulled: false}, {Node: "n2", Queue: "q", Image: "i", Pulled: true}}},
			[]string{"image_not_prepulled{image=ghcr.io/x/y@sha256:ab node=n1 queue=q}"}},
		{"wait p95 over 10m", Facts{Queues: []Queue{{Name: "a", Online: 1, WaitP95: 11 * time.Minute, WaitKnown: true}, {Name: "b", Online: 1, WaitP95: 10 * time.Minute, WaitKnown: true}, {Name: "c", Online: 1, WaitP95: time.Hour}}},
			[]string{"queue_wait_high{queue=a}"}},
		{"a job waiting over 10m with no waits yet", Facts{Queues: []Queue{{Name: "a", Online: 1, Oldest: 11 * time.Minute}, {Name: "b", Online: 1, Oldest: 10 * time.Minute}}},
			[]string{"queue_wait_high{queue=a}"}},
		{"budget used up", Facts{BudgetKnown: true, Budget: Budget{Limit: 10, Used: 10, OrgRemaining: -1}}, []string{"api_budget_exhausted{}"}},
		{"a user's limit at 0", Facts{BudgetKnown: true, Budget: Budget{Limit: 10, Used: 1, OrgRemaining: 5, UserRemaining: []int{-1, 0}}}, []string{"api_budget_exhausted{}"}},
		{"budget left", Facts{BudgetKnown: true, Budget: Budget{Limit: 10, Used: 9, OrgRemaining: 1, UserRemaining: []int{-1, 3}}}, nil},
		{"unwired sources say nothing", Facts{Canaries: []Canary{{Drift: 1}}, Images: []Image{{Node: "n"}}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := NewEvaluator(Rules{For: map[string]time.Duration{}, NoisyShare: 0.5, MinRuns: 4, Faults: 2, WaitP95: 10 * time.Minute}, nil, nil)
			var got []string
			for _, tr := range e.Evaluate(t0, tc.f) {
				var l []string
				for k, v := range tr.Alarm.Labels {
					l = append(l, k+"="+v)
				}
				slices.Sort(l)
				got = append(got, tr.Alarm.Condition+"{"+strings.Join(l, " ")+"}")
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// TestAlarmID: the id depends on the condition and the labels, not on
// their order.
func TestAlarmID(t *testing.T) {
	t.Parallel()
	a := AlarmID(AgentLost, map[string]string{"agent": "a", "queue": "q"})
	for _, tc := range []struct {
		name   string
		cond   string
		labels map[string]string
		same   bool
	}{
		{"same labels", AgentLost, map[string]string{"queue": "q", "agent": "a"}, true},
		{"other condition", AgentNoisy, map[string]string{"agent": "a", "queue": "q"}, false},
		{"other agent", AgentLost, map[string]string{"agent": "b", "queue": "q"}, false},
		{"label boundary", AgentLost, map[string]string{"agent": "a\x00queue=q"}, false},
	} {
		if got := AlarmID(tc.cond, tc.labels); (got == a) != tc.same || len(got) != 16 {
			t.Errorf("%s: id %s vs %s, want same=%v", tc.name, got, a, tc.same)
		}
	}
}

// TestSlackBodyInert: a hostile agent name cannot mention a channel or
// make a link in Slack.
func TestSlackBodyInert(t *testing.T) {
	t.Parallel()
	tr := Transition{Status: Firing, At: t0, Alarm: Alarm{ID: "x", Condition: AgentLost, Summary: "agent <!channel> & <https://evil|click>", Labels: map[string]string{"agent": "<@U1>"}, Since: t0}}
	b, err := SlackBody(tr)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil || len(m) != 1 {
		t.Fatalf("body %s: want one text field (%v)", b, err)
	}
	if strings.ContainsAny(m["text"], "<>") || !strings.Contains(m["text"], "&lt;!channel&gt; &amp; &lt;https://evil|click&gt;") {
		t.Errorf("text %q is not escaped", m["text"])
	}
}

// TestParseConfig: good configs load, bad ones say what is wrong and
// never repeat a URL.
func TestParseConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, yaml, err string }{
		{"good", "receivers:\n- {name: s, kind: slack, url: https://hooks.slack.com/services/T/B/X}\nroutes:\n- {vendors: [nvidia], receivers: [s]}\n", ""},
		{"unknown key", "receivers:\n- {name: s, kind: slack, url: https://h/x, channel: c}\n", "field channel not found"},
		{"bad kind", "receivers:\n- {name: s, kind: email, url: https://h/x}\n", `kind "email"`},
		{"no url", "receivers:\n- {name: s, kind: slack}\n", "give one of url and url_file"},
		{"both urls", "receivers:\n- {name: s, kind: slack, url: https://h/x, url_file: f}\n", "give one of url and url_file"},
		{"bad url", "receivers:\n- {name: s, kind: slack, url: 'ftp://h/SECRET'}\n", "not an absolute http(s) URL"},
		{"twice", "receivers:\n- {name: s, kind: slack, url: https://h/x}\n- {name: s, kind: webhook, url: https://h/y}\n", "named twice"},
		{"unknown receiver", "receivers:\n- {name: s, kind: slack, url: https://h/x}\nroutes:\n- {receivers: [t]}\n", `receiver "t", which is not defined`},
		{"empty route", "receivers:\n- {name: s, kind: slack, url: https://h/x}\nroutes:\n- {queues: [q]}\n", "names no receiver"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseConfig([]byte(tc.yaml))
			switch {
			case tc.err == "" && err != nil:
				t.Errorf("error %v, want none", err)
			case tc.err != "" && !errors.Is(err, ErrConfig):
				t.Errorf("error %v, want an ErrConfig", err)
			// The message is the contract: it tells the operator what to fix in the file.
			case tc.err != "" && !strings.Contains(err.Error(), tc.err):
				t.Errorf("error %v, want one containing %q", err, tc.err)
			// The text is the contract: a URL may hold a secret, and must not appear.
			case err != nil && strings.Contains(err.Error(), "SECRET"):
				t.Errorf("error %v repeats the URL", err)
			}
		})
	}
}
