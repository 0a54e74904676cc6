package node

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/sandbox/gpuhealth"
)

// ResetSudoers is the sudoers drop-in `kbgen node install
// --allow-gpu-reset` writes: the agents' user may run, as root and
// without a password, exactly the reset command of each GPU of the plan
// (sandbox.ResetArgv), nothing else. sudo ignores a drop-in whose name
// has a '.', so it has none.
const ResetSudoers = "/etc/sudoers.d/kbgen-gpu-reset"

// resetSudoers renders ResetSudoers for the plan's whole GPUs (a MIG
// instance cannot be reset alone; its GPU is listed by its own agent or
// not at all).
func resetSudoers(p *Plan, user string) ([]byte, error) {
	if err := validUser(user); err != nil {
		return nil, err
	}
	var b strings.Builder
	b.WriteString("# Written by `kbgen node install --allow-gpu-reset`: kbgen sandbox resets a\n# leased GPU that failed the clean-GPU check (docs/isolation.md).\n")
	var seen []string
	for _, a := range p.Agents {
		for _, g := range append([]GPU{a.GPU}, a.GPUs...) {
			id := g.UUID
			if p.Runtime == contract.RuntimeROCm {
				id = g.PCIBus
			}
			argv := gpuhealth.ResetArgv(p.Runtime, id)
			if argv == nil || slices.Contains(seen, id) {
				continue
			}
			seen = append(seen, id)
			cmd, err := sudoersCommand(argv)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", ResetSudoers, err)
			}
			fmt.Fprintf(&b, "%s ALL=(root) NOPASSWD: %s\n", user, cmd)
		}
	}
	return []byte(b.String()), nil
}
