package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// cliResult is what one in-process kbgen invocation produced.
type cliResult struct {
	stdout, stderr string
	code           int
}

// runKbgen runs kbgen in process with exactly env as its environment, or
// this process's environment when env is nil.
func runKbgen(t *testing.T, env map[string]string, stdin string, args ...string) cliResult {
	t.Helper()
	var out, errOut bytes.Buffer
	environ := os.Environ()
	if env != nil {
		environ = nil
		for k, v := range env {
			environ = append(environ, k+"="+v)
		}
	}
	g := &Globals{Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errOut, Env: environ}
	code := runCLI(g, args)
	return cliResult{stdout: out.String(), stderr: errOut.String(), code: code}
}
