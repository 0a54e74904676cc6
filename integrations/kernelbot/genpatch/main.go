// Command genpatch writes integrations/kernelbot/kernelbot.patch from the
// built-in vendor registry (go generate ./integrations/kernelbot).
package main

import (
	"fmt"
	"os"

	"github.com/gpu-mode/kbgen/integrations/kernelbot"
	"github.com/gpu-mode/kbgen/registry"
)

func main() {
	reg, err := registry.Load("")
	if err == nil {
		var patch []byte
		if patch, err = kernelbot.Patch(reg); err == nil {
			err = os.WriteFile(kernelbot.PatchFile, patch, 0o644)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "genpatch:", err)
		os.Exit(1)
	}
}
