package kbgen

import (
	"embed"
	"io/fs"
)

//go:embed .buildkite/plugins/gpu-docker
var plugins embed.FS

// GPUDockerPlugin is .buildkite/plugins/gpu-docker as this kbgen was built
// with it: plugin.yml and hooks/command.
func GPUDockerPlugin() fs.FS {
	sub, err := fs.Sub(plugins, ".buildkite/plugins/gpu-docker")
	if err != nil {
		panic(err) // the embed pattern above names this directory
	}
	return sub
}
