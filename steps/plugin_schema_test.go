package steps

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

// TestPluginSchemaMatchesConfigType keeps plugin.yml and GPUDockerConfig in
// step: the same keys, all required, nothing else allowed.
func TestPluginSchemaMatchesConfigType(t *testing.T) {
	t.Parallel()
	s := loadPluginSchema(t)
	var fields []string
	rt := reflect.TypeOf(GPUDockerConfig{})
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
		k8sSource := (&pipeline.Plugin{Source: KubernetesPluginSource}).FullSource()
		if _, k8s := doc.Steps[0].Plugins[0][k8sSource]; k8s {
			continue
		}
		cfg := doc.Steps[0].Plugins[0][GPUDockerPluginSource]
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
