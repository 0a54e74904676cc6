package sandbox

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/plugincfg"
	"github.com/gpu-mode/kbgen/sandbox/refusal"
)

// PluginName is the name the agent derives from the plugin's source
// (./.buildkite/plugins/gpu-docker → gpu-docker → BUILDKITE_PLUGIN_GPU_DOCKER_*).
const PluginName = "gpu-docker"

// ConfigFromEnv reads the gpu-docker plugin config the agent hands to the
// plugin's hooks. BUILDKITE_PLUGINS is preferred when it names the plugin,
// because it keeps JSON types; the flat BUILDKITE_PLUGIN_GPU_DOCKER_* vars,
// which every agent sets, are the fallback.
func ConfigFromEnv(lookup contract.Lookup) (plugincfg.GPUDocker, error) {
	if js, ok := lookup(contract.EnvPlugins); ok && strings.TrimSpace(js) != "" {
		raw, found, err := pluginFromJSON([]byte(js))
		if err != nil {
			return plugincfg.GPUDocker{}, err
		}
		if found {
			return configFromMap(raw)
		}
	}
	raw := map[string]any{}
	for _, key := range configKeys() {
		if v, ok := lookup(plugincfg.EnvPrefix + envKey(key)); ok {
			raw[key] = v
		}
	}
	if len(raw) == 0 {
		return plugincfg.GPUDocker{}, refusal.ConfigErrorf("", "no %s plugin in %s and no %s* variables: run this from the plugin's command hook", PluginName, contract.EnvPlugins, plugincfg.EnvPrefix)
	}
	return configFromMap(raw)
}

// pluginFromJSON finds the gpu-docker entry in BUILDKITE_PLUGINS
// ([{"<source>": {config}}, ...]).
func pluginFromJSON(js []byte) (map[string]any, bool, error) {
	var list []map[string]json.RawMessage
	if err := json.Unmarshal(js, &list); err != nil {
		return nil, false, refusal.ConfigErrorf("", "%s is not a JSON list of plugins: %v", contract.EnvPlugins, err)
	}
	for _, entry := range list {
		for source, cfg := range entry {
			if pluginNameOf(source) != PluginName {
				continue
			}
			raw := map[string]any{}
			if len(bytes.TrimSpace(cfg)) > 0 && string(bytes.TrimSpace(cfg)) != "null" {
				dec := json.NewDecoder(bytes.NewReader(cfg))
				dec.UseNumber()
				if err := dec.Decode(&raw); err != nil {
					return nil, false, refusal.ConfigErrorf("", "%s: the %s config is not a JSON object: %v", contract.EnvPlugins, source, err)
				}
			}
			return raw, true, nil
		}
	}
	return nil, false, nil
}

// pluginNameOf is the agent's name for a plugin source (plugincfg.PluginName).
func pluginNameOf(source string) string { return plugincfg.PluginName(source) }

// envKey is the agent's env spelling of a config key.
func envKey(key string) string {
	return strings.ToUpper(strings.ReplaceAll(key, "-", "_"))
}

// configKeys are plugincfg.GPUDocker's JSON keys, read from its tags so a key
// added there is picked up here.
func configKeys() []string {
	t := reflect.TypeOf(plugincfg.GPUDocker{})
	keys := make([]string, 0, t.NumField())
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		keys = append(keys, name)
	}
	return keys
}

// configFromMap fills a plugincfg.GPUDocker from loosely typed values: env vars
// are always strings and YAML may quote numbers, so "4" and 4 both count.
// Unknown keys are an error: a typo such as "memroy" must not silently
// fall back to a default.
func configFromMap(raw map[string]any) (plugincfg.GPUDocker, error) {
	var c plugincfg.GPUDocker
	v := reflect.ValueOf(&c).Elem()
	t := v.Type()
	known := map[string]int{}
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		known[name] = i
	}
	for key, val := range raw {
		i, ok := known[key]
		if !ok {
			return c, refusal.ConfigErrorf(key, "unknown key (known: %s)", strings.Join(configKeys(), ", "))
		}
		s := scalarText(val)
		if s == "" {
			continue
		}
		f := v.Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString(s)
		case reflect.Int:
			n, err := strconv.Atoi(s)
			if err != nil || n < 0 {
				return c, refusal.ConfigErrorf(key, "%q is not a non-negative integer", s)
			}
			f.SetInt(int64(n))
		default:
			return c, refusal.ConfigErrorf(key, "unsupported field kind %s", f.Kind())
		}
	}
	return c, nil
}

func scalarText(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return strings.TrimSpace(x)
	case json.Number:
		return x.String()
	default:
		return fmt.Sprint(x)
	}
}
