package plugincfg_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/buildkite/go-pipeline"
	"gopkg.in/yaml.v3"

	"github.com/gpu-mode/kbgen/internal/imageref"
	"github.com/gpu-mode/kbgen/internal/size"
	"github.com/gpu-mode/kbgen/plugincfg"
	"github.com/gpu-mode/kbgen/steps"
)

type pluginSchema struct {
	Configuration struct {
		Properties map[string]struct {
			Type    string   `yaml:"type"`
			Enum    []string `yaml:"enum"`
			Pattern string   `yaml:"pattern"`
			Minimum *int     `yaml:"minimum"`
		} `yaml:"properties"`
		Required             []string `yaml:"required"`
		AdditionalProperties bool     `yaml:"additionalProperties"`
	} `yaml:"configuration"`
}

func loadPluginSchema(t *testing.T) pluginSchema {
	t.Helper()
	data, err := os.ReadFile("../.buildkite/plugins/gpu-docker/plugin.yml")
	if err != nil {
		t.Fatal(err)
	}
	var s pluginSchema
	if err := yaml.Unmarshal(data, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestPluginSchemaMatchesConfigType keeps plugin.yml and plugincfg.GPUDocker in
// step: the same keys, all required, nothing else allowed.
func TestPluginSchemaMatchesConfigType(t *testing.T) {
	t.Parallel()
	s := loadPluginSchema(t)
	var fields []string
	rt := reflect.TypeOf(plugincfg.GPUDocker{})
	for i := 0; i < rt.NumField(); i++ {
		name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
		fields = append(fields, name)
		kind := map[reflect.Kind]string{reflect.String: "string", reflect.Int: "integer"}[rt.Field(i).Type.Kind()]
		if got := s.Configuration.Properties[name].Type; got != kind {
			t.Errorf("%s: schema type %q, Go type %q", name, got, kind)
		}
	}
	var props []string
	for k := range s.Configuration.Properties {
		props = append(props, k)
	}
	sort.Strings(fields)
	sort.Strings(props)
	req := slices.Clone(s.Configuration.Required)
	sort.Strings(req)
	if !slices.Equal(fields, props) || !slices.Equal(fields, req) {
		t.Errorf("schema properties %v / required %v != config fields %v", props, req, fields)
	}
	if s.Configuration.AdditionalProperties {
		t.Error("schema allows additional properties")
	}
}

// TestPluginSchemaPatternsAgree: plugin.yml's patterns say what the
// generator emits, so they must take every image internal/imageref takes
// (and nothing it refuses) and every size in internal/size's written form.
func TestPluginSchemaPatternsAgree(t *testing.T) {
	t.Parallel()
	props := loadPluginSchema(t).Configuration.Properties
	image := regexp.MustCompile(props["image"].Pattern)
	digest := "@sha256:" + strings.Repeat("ab", 32)
	for _, ref := range []string{
		"ubuntu", "ghcr.io/gpu-mode/kbgen-runner-cuda:12.8.1", "img" + digest, "localhost:5000/a/b:t" + digest,
		"Example.com/img:12.8-Devel", "a.b_c__d---e/f", "img@sha512:" + strings.Repeat("ab", 64),
		"", "--privileged", "gpu-mode/Kbgen", "img$(id)", "a:b:c", "a//b", "img-", "a___b", "img:.x",
		"img@sha256:abc", "img@md5:" + strings.Repeat("a", 32), "[::1]:5000/img", "img:" + strings.Repeat("t", 129),
	} {
		_, err := imageref.Parse(ref)
		if image.MatchString(ref) != (err == nil) {
			t.Errorf("image %q: schema pattern matches %v, imageref.Parse error %v", ref, image.MatchString(ref), err)
		}
	}
	for _, key := range []string{"memory", "shm-size"} {
		pattern := regexp.MustCompile(props[key].Pattern)
		for _, in := range []string{"64g", "1.5g", "64GiB", "100b", "2t", "1p", "68719476737"} {
			b, err := size.Parse(in)
			if err != nil || !pattern.MatchString(b.String()) {
				t.Errorf("%s %q written %q (%v): the schema pattern refuses it", key, in, b, err)
			}
		}
	}
}

// TestGoldenPluginConfigsValidate checks every plugin block the generator
// emitted (the golden pipelines) against plugin.yml's schema.
func TestGoldenPluginConfigsValidate(t *testing.T) {
	t.Parallel()
	s := loadPluginSchema(t)
	files, _ := filepath.Glob("../golden/pipelines/*/*.yml")
	if len(files) == 0 {
		t.Fatal("no golden pipelines")
	}
	for _, f := range files {
		data, _ := os.ReadFile(f)
		var doc struct {
			Steps []struct {
				Plugins []map[string]map[string]any `yaml:"plugins"`
			} `yaml:"steps"`
		}
		if err := yaml.Unmarshal(data, &doc); err != nil {
			t.Fatal(err)
		}
		k8sSource := (&pipeline.Plugin{Source: steps.KubernetesPluginSource}).FullSource()
		if _, k8s := doc.Steps[0].Plugins[0][k8sSource]; k8s {
			continue
		}
		cfg := doc.Steps[0].Plugins[0][plugincfg.Source]
		if cfg == nil {
			t.Fatalf("%s: no gpu-docker plugin", f)
		}
		for key, val := range cfg {
			p, ok := s.Configuration.Properties[key]
			if !ok {
				t.Errorf("%s: key %q not in schema", f, key)
				continue
			}
			switch v := val.(type) {
			case string:
				if p.Type != "string" || (len(p.Enum) > 0 && !slices.Contains(p.Enum, v)) ||
					(p.Pattern != "" && !regexp.MustCompile(p.Pattern).MatchString(v)) {
					t.Errorf("%s: %s=%q violates the schema", f, key, v)
				}
			case int:
				if p.Type != "integer" || (p.Minimum != nil && v < *p.Minimum) {
					t.Errorf("%s: %s=%d violates the schema", f, key, v)
				}
			default:
				b, _ := json.Marshal(v)
				t.Errorf("%s: %s has unexpected value %s", f, key, b)
			}
		}
	}
}
