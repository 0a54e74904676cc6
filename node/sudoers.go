package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/gpu-mode/kbgen/internal/lazyre"
)

// userName is a login name as useradd takes it (POSIX portable names):
// the unit's User= and the sudoers line name it, so nothing else may
// reach them.
var userName = lazyre.New(`^[A-Za-z_][A-Za-z0-9_.-]{0,31}$`)

// sudoersAlias is what sudoers(5) reads as an alias name, not a user:
// upper case, digits and '_', starting with a letter ("ALL" among them).
var sudoersAlias = lazyre.New(`^[A-Z][A-Z0-9_]*$`)

// validUser checks the agents' user for the units' User= and the
// sudoers drop-in's user field. sudoers(5) reads "ALL" as every user,
// "%x" as a group, "+x" as a netgroup, "#n" as a uid, and an upper-case
// word as an alias; none of them is one login name, so all are refused
// (the first three are already outside the login-name grammar).
func validUser(u string) error {
	if !userName.MatchString(u) {
		return fmt.Errorf("user %q: want a login name (letters, digits, '_', '.', '-', not starting with a digit, '-', '%%', '+' or '#'; at most 32)", u)
	}
	if sudoersAlias.MatchString(u) {
		return fmt.Errorf("user %q: sudoers reads an upper-case name as an alias (ALL: every user); name the agents' own user, e.g. buildkite-agent", u)
	}
	return nil
}

// sudoersArg is one command argument sudo may be asked to match: the
// characters a GPU UUID, a PCI address or a path use. sudoers(5) wants
// ',', ':', '=' and '\' escaped in arguments; whitespace would split one,
// '#' and a newline would start a comment or a new rule, so the grammar
// keeps them out rather than trusting an escape.
var sudoersArg = lazyre.New(`^[A-Za-z0-9_./:=,@+-]+$`)

// sudoersCommand writes argv as a sudoers command: sudo matches the
// arguments literally, and ',', ':', '=' and '\' in them must be escaped
// (sudoers(5)), as in a PCI address. An argument outside sudoersArg is
// refused.
func sudoersCommand(argv []string) (string, error) {
	r := strings.NewReplacer(",", `\,`, ":", `\:`, "=", `\=`)
	out := make([]string, len(argv))
	for i, a := range argv {
		if !sudoersArg.MatchString(a) {
			return "", fmt.Errorf("sudoers command argument %q: want letters, digits and _./:=,@+- only", a)
		}
		out[i] = r.Replace(a)
	}
	return strings.Join(out, " "), nil
}

// SudoersCheck checks a rendered sudoers file before it is installed: a
// drop-in sudo cannot parse stops every sudo on the node. It returns a
// note when it could not check, and an error when the file is refused.
type SudoersCheck func(ctx context.Context, data []byte) (note string, err error)

// ErrSudoersRefused is a rendered sudoers drop-in that visudo -c does not
// parse; the error adds what visudo said.
var ErrSudoersRefused = errors.New("visudo -c refuses the rendered " + ResetSudoers)

// Visudo is SudoersCheck by `visudo -cf` (sudo's own parser, strict
// mode off, the file only); where visudo is absent it says so and
// passes, since a node without sudo never reads the drop-in anyway.
func Visudo(ctx context.Context, data []byte) (string, error) {
	visudo, err := exec.LookPath("visudo")
	if err != nil {
		return fmt.Sprintf("%s not checked with visudo -c: visudo is not installed (apt-get install sudo)", ResetSudoers), nil
	}
	dir, err := os.MkdirTemp("", "kbgen-sudoers-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	f := filepath.Join(dir, "kbgen-gpu-reset")
	if err := os.WriteFile(f, data, 0o440); err != nil {
		return "", err
	}
	out, err := exec.CommandContext(ctx, visudo, "-c", "-f", f).CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return "", fmt.Errorf("%w: %s", ErrSudoersRefused, strings.TrimSpace(string(out)))
	}
	return "", err
}
