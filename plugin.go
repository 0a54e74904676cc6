// Package kbgen is the repository's files that the kbgen binary carries, so
// that a released binary alone installs a complete node: the gpu-docker
// plugin that `kbgen node install` pins on the host by default.
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
