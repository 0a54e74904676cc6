package sandbox

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpu-mode/kbgen/plugincfg"
	"github.com/gpu-mode/kbgen/sandbox/refusal"
)

func TestConfigFromEnv(t *testing.T) {
	t.Parallel()
	want := plugincfg.GPUDocker{Image: "ghcr.io/gpu-mode/kbgen-runner-cuda:12.8.1", Runtime: "nvidia", GPUs: 1, CPUs: 12, Memory: "200g", ShmSize: "32g", PidsLimit: 4096, Network: "none"}
	tests := []struct {
		name string
		env  map[string]string
	}{
		{"flat vars", map[string]string{
			"BUILDKITE_PLUGIN_GPU_DOCKER_IMAGE":      want.Image,
			"BUILDKITE_PLUGIN_GPU_DOCKER_RUNTIME":    "nvidia",
			"BUILDKITE_PLUGIN_GPU_DOCKER_GPUS":       "1",
			"BUILDKITE_PLUGIN_GPU_DOCKER_CPUS":       "12",
			"BUILDKITE_PLUGIN_GPU_DOCKER_MEMORY":     "200g",
			"BUILDKITE_PLUGIN_GPU_DOCKER_SHM_SIZE":   "32g",
			"BUILDKITE_PLUGIN_GPU_DOCKER_PIDS_LIMIT": "4096",
			"BUILDKITE_PLUGIN_GPU_DOCKER_NETWORK":    "none",
		}},
		{"plugins json wins over flat vars", map[string]string{
			"BUILDKITE_PLUGINS": `[{"github.com/buildkite-plugins/docker-buildkite-plugin#v5.0.0":{"image":"other"}},` +
				`{"./.buildkite/plugins/gpu-docker":{"image":"ghcr.io/gpu-mode/kbgen-runner-cuda:12.8.1","runtime":"nvidia","gpus":1,"cpus":12,"memory":"200g","shm-size":"32g","pids-limit":4096,"network":"none"}}]`,
			"BUILDKITE_PLUGIN_GPU_DOCKER_IMAGE": "stale",
		}},
		{"plugins json with quoted numbers and a remote source", map[string]string{
			"BUILDKITE_PLUGINS": `[{"github.com/gpu-mode/gpu-docker-buildkite-plugin#v1":{"image":"ghcr.io/gpu-mode/kbgen-runner-cuda:12.8.1","runtime":"nvidia","gpus":"1","cpus":"12","memory":"200g","shm-size":"32g","pids-limit":"4096","network":"none"}}]`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ConfigFromEnv(lookup(tt.env))
			if err != nil || got != want {
				t.Errorf("ConfigFromEnv = %+v, %v\nwant %+v", got, err, want)
			}
		})
	}
}

func TestConfigFromEnvErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		env  map[string]string
		key  string // the config key at fault, "" for the plugin list itself
		msg  string
	}{
		{"nothing", map[string]string{}, "", "no gpu-docker plugin"},
		{"other plugin only", map[string]string{"BUILDKITE_PLUGINS": `[{"docker#v5":{"image":"x"}}]`}, "", "no gpu-docker plugin"},
		{"bad json", map[string]string{"BUILDKITE_PLUGINS": `{`}, "", "not a JSON list"},
		{"config not object", map[string]string{"BUILDKITE_PLUGINS": `[{"gpu-docker":[1]}]`}, "", "not a JSON object"},
		{"unknown key", map[string]string{"BUILDKITE_PLUGINS": `[{"gpu-docker":{"image":"x","privileged":true}}]`}, "privileged", "unknown key"},
		{"bad int", map[string]string{"BUILDKITE_PLUGIN_GPU_DOCKER_CPUS": "many"}, "cpus", "not a non-negative integer"},
		{"negative int", map[string]string{"BUILDKITE_PLUGIN_GPU_DOCKER_GPUS": "-1"}, "gpus", "not a non-negative integer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := ConfigFromEnv(lookup(tt.env))
			var c *refusal.ConfigError
			if !errors.As(err, &c) || c.Key != tt.key {
				t.Fatalf("err = %v, want a config error of key %q", err, tt.key)
			}
			// The message is the contract: it tells the pipeline's author what to fix.
			if !strings.Contains(c.Msg, tt.msg) {
				t.Errorf("err = %v, want it to say %q", err, tt.msg)
			}
		})
	}
}

func TestPluginNameOf(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"./.buildkite/plugins/gpu-docker":                                  "gpu-docker",
		"./.buildkite/plugins/gpu-docker/":                                 "gpu-docker",
		"github.com/gpu-mode/gpu-docker-buildkite-plugin#v1.2.0":           "gpu-docker",
		"https://github.com/gpu-mode/gpu-docker-buildkite-plugin.git#main": "gpu-docker",
		"docker#v5.0.0": "docker",
	} {
		if got := pluginNameOf(in); got != want {
			t.Errorf("pluginNameOf(%q) = %q, want %q", in, got, want)
		}
	}
}
