package bkdoctor

import (
	"strings"

	"github.com/gpu-mode/kbgen"
	"github.com/gpu-mode/kbgen/internal/contract"
)

// SettingsSteps is the settings steps kbgen's pipeline must have
// (kbgen.PipelineSettings, shown verbatim in docs/buildkite-setup.md), its
// bootstrap on controlQueue.
func SettingsSteps(controlQueue string) string {
	return strings.Replace(string(kbgen.PipelineSettings), "queue: "+contract.ControlQueue, "queue: "+controlQueue, 1)
}
