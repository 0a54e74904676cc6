package bkdoctor

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"

	buildkite "github.com/buildkite/go-buildkite/v4"
	"github.com/buildkite/go-pipeline"
)

const stepsCheckName = "settings steps"

// stepsFix is what to do with settings steps that are not kbgen's.
func stepsFix(queue string) string {
	return fmt.Sprintf("Pipeline Settings → Steps: replace them with the YAML of docs/buildkite-setup.md#the-pipeline, its bootstrap on queue %s", queue)
}

// stepsCheck compares the pipeline's settings steps (what every build
// starts from) with SettingsSteps: one step, the bootstrap, on the control
// queue, as documented. Anything else there runs at the start of every
// build, next to the signing key.
func stepsCheck(p *buildkite.Pipeline, cfg Config) Check {
	fail := func(format string, a ...any) Check {
		return Check{Name: stepsCheckName, Level: Fail, Detail: fmt.Sprintf(format, a...), Fix: stepsFix(cfg.ControlQueue)}
	}
	if strings.TrimSpace(p.Configuration) == "" {
		return fail("the pipeline has no YAML steps (%d steps of the visual editor): Buildkite's REST `configuration` is empty", len(p.Steps))
	}
	got, err := stepMaps(p.Configuration)
	if err != nil {
		return fail("the settings steps do not parse: %v", err)
	}
	want, err := stepMaps(SettingsSteps(cfg.ControlQueue))
	if err != nil || len(want) != 1 {
		panic(fmt.Sprintf("bkdoctor: .buildkite/pipeline-settings.yml: %v", err)) // embedded; TestSettingsSteps parses it
	}
	i := slices.IndexFunc(got, isBootstrap)
	switch {
	case i < 0 && slices.ContainsFunc(got, isUpload):
		return fail("no step runs kbgen generate --upload: builds start from %s, which uploads .buildkite/pipeline.yml from the checkout: a commit would decide what runs next to the signing key, and that file routes the bootstrap by the build's env", describe(got))
	case i < 0:
		return fail("no step runs kbgen generate --upload: builds start from %s", describe(got))
	case len(got) > 1:
		return fail("%d steps beside the bootstrap (%s): each runs at the start of every build", len(got)-1, describe(slices.Delete(slices.Clone(got), i, i+1)))
	}
	if c, bad := queueOf(got[i], cfg); bad {
		return c
	}
	if diff := differing(got[i], want[0]); len(diff) > 0 {
		return fail("the bootstrap differs from the documented step in %s", strings.Join(diff, ", "))
	}
	return Check{Name: stepsCheckName, Level: Pass, Detail: "the documented bootstrap (kbgen generate --upload) on queue " + cfg.ControlQueue + ", nothing else"}
}

// queueOf fails a bootstrap that runs off the control queue, saying what
// that breaks.
func queueOf(step map[string]any, cfg Config) (Check, bool) {
	q, _ := agentsOf(step)["queue"].(string)
	fail := func(format string, a ...any) (Check, bool) {
		return Check{Name: stepsCheckName, Level: Fail, Detail: fmt.Sprintf(format, a...), Fix: stepsFix(cfg.ControlQueue)}, true
	}
	switch {
	case q == cfg.ControlQueue:
		return Check{}, false
	case q == "":
		return fail("the bootstrap names no queue: it runs on the cluster's default queue, not on the control agents that hold the signing key")
	case strings.Contains(q, "$"):
		return fail("the bootstrap's queue %q comes from the build's env: whoever creates a build picks where the bootstrap runs", q)
	}
	if _, err := cfg.Registry.Lookup(q); err == nil {
		return fail("the bootstrap runs on vendor queue %s: vendor agents hold no signing key (nodes that verify refuse every eval step), and a vendor's host would generate other vendors' steps", q)
	}
	return fail("the bootstrap runs on queue %s, not on the control queue %s", q, cfg.ControlQueue)
}

// stepMaps parses steps as Buildkite would (go-pipeline) and returns each
// as its JSON object, or the step's type for a non-command step.
func stepMaps(yaml string) ([]map[string]any, error) {
	p, err := pipeline.Parse(strings.NewReader(yaml))
	if err != nil {
		return nil, err
	}
	var out []map[string]any
	for _, st := range p.Steps {
		m := map[string]any{}
		cmd, ok := st.(*pipeline.CommandStep)
		if !ok {
			out = append(out, map[string]any{"type": fmt.Sprintf("%T", st)})
			continue
		}
		b, err := json.Marshal(cmd)
		if err != nil {
			return nil, err
		}
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

func isBootstrap(m map[string]any) bool {
	cmd, _ := m["command"].(string)
	return strings.Contains(cmd, "kbgen generate")
}

func isUpload(m map[string]any) bool {
	cmd, _ := m["command"].(string)
	return strings.Contains(cmd, "pipeline upload")
}

// agentsOf is a step's agents as a map: `agents:` is a map or a list of
// key=value.
func agentsOf(m map[string]any) map[string]any {
	switch a := m["agents"].(type) {
	case map[string]any:
		return a
	case []any:
		out := map[string]any{}
		for _, kv := range a {
			if k, v, ok := strings.Cut(fmt.Sprint(kv), "="); ok {
				out[k] = v
			}
		}
		return out
	}
	return map[string]any{}
}

// differing lists the fields in which got differs from want, agents
// compared as maps, the label ignored (only a name in the UI).
func differing(got, want map[string]any) []string {
	var diff []string
	for _, k := range unionKeys(got, want) {
		switch {
		case k == "label" || k == "name":
		case k == "agents":
			if !reflect.DeepEqual(agentsOf(got), agentsOf(want)) {
				diff = append(diff, k)
			}
		case k == "command":
			if strings.TrimSpace(fmt.Sprint(got[k])) != strings.TrimSpace(fmt.Sprint(want[k])) {
				diff = append(diff, k)
			}
		case !reflect.DeepEqual(got[k], want[k]):
			diff = append(diff, k)
		}
	}
	return diff
}

func unionKeys(a, b map[string]any) []string {
	var keys []string
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// describe names steps for a reader: their commands, or their type.
func describe(steps []map[string]any) string {
	var names []string
	for _, s := range steps {
		if c, ok := s["command"].(string); ok {
			names = append(names, fmt.Sprintf("%q", firstLine(c)))
		} else {
			names = append(names, strings.TrimPrefix(fmt.Sprint(s["type"]), "*pipeline."))
		}
	}
	if len(names) == 0 {
		return "no steps"
	}
	return strings.Join(names, ", ")
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return line
}
