// Command genpatch writes integrations/kernelbot/kernelbot.patch from the
// built-in vendor registry, and the table of Buildkite GPUs in
// docs/backend.md (go generate ./integrations/kernelbot).
package main

import (
	"fmt"
	"os"

	"github.com/gpu-mode/kbgen/integrations/kernelbot"
	"github.com/gpu-mode/kbgen/registry"
)

func main() {
	if err := generate(); err != nil {
		fmt.Fprintln(os.Stderr, "genpatch:", err)
		os.Exit(1)
	}
}

func generate() error {
	reg, err := registry.Load("")
	if err != nil {
		return err
	}
	patch, err := kernelbot.Patch(reg)
	if err != nil {
		return err
	}
	if err := os.WriteFile(kernelbot.PatchFile, patch, 0o644); err != nil {
		return err
	}
	gpus, err := kernelbot.GPUs(reg)
	if err != nil {
		return err
	}
	page, err := os.ReadFile(kernelbot.DocsFile)
	if err != nil {
		return err
	}
	table, err := kernelbot.DocsTable(string(page), gpus)
	if err != nil {
		return err
	}
	return os.WriteFile(kernelbot.DocsFile, []byte(table), 0o644)
}
