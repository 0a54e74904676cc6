// Package shellquote is kbgen's one shell-quoting rule: Python's
// shlex.quote. Kernelbot records each command it ran as
// " ".join(shlex.quote(a) for a in argv), so the runner must quote the same
// way for its CompileResult.command to match byte for byte; the sandbox's
// --dry-run and `kbgen node env`/install use the same rule, so everything
// kbgen prints for a shell pastes back into one (bash, dash, sh).
package shellquote

import "strings"

// Quote is shlex.quote: s unchanged when it is non-empty and made only of
// ASCII letters, digits and _@%+=:,./- ; else s in single quotes, each
// single quote written as '"'"'.
func Quote(s string) string {
	if s == "" {
		return "''"
	}
	if strings.IndexFunc(s, unsafe) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'"'"'`) + "'"
}

// Join is Kernelbot's _make_cmd: each argument quoted, joined by spaces.
func Join(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = Quote(a)
	}
	return strings.Join(q, " ")
}

func unsafe(r rune) bool {
	return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_@%+=:,./-", r))
}
