// Package kbgen is the repository's files that the kbgen binary carries, so
// that a released binary alone installs a complete node: the gpu-docker
// plugin that `kbgen node install` pins on the host by default
// (plugin.go), and the pipeline's settings steps (settings.go).
package kbgen
