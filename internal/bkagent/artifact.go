package bkagent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"github.com/gpu-mode/kbgen/internal/lazyre"
)

// UnsafeNamesError is the artifact names ArtifactUpload refused (not
// SafeArtifactPath), as given; its text quotes each in ASCII, inert.
type UnsafeNamesError struct{ Names []string }

func (e *UnsafeNamesError) Error() string {
	quoted := make([]string, len(e.Names))
	for i, n := range e.Names {
		quoted[i] = strconv.QuoteToASCII(n)
	}
	return fmt.Sprintf("artifact upload: refused %d unsafe name(s) (want %s): %s", len(e.Names), safeArtifactRule, strings.Join(quoted, ", "))
}

// ArtifactUpload uploads files (paths relative to dir) with one `artifact
// upload` run in dir, so the artifacts keep those names (result.json,
// profile_data/profile.0.zip): what the eval step's artifact_paths and
// `kbgen submit` expect. The agent reads its argument as glob patterns
// joined by ";" (agent clicommand/artifact_upload.go: --delimiter ";",
// globs unless --literal), so a name the container chose could add a
// pattern ("x;*" uploads the whole checkout): only SafeArtifactPath names
// are passed on; the others are refused in the error, and the rest still
// uploaded. It returns once Buildkite has every artifact's final state
// (see uploadDone), not when the agent's uploader has finished sleeping.
func (a *Agent) ArtifactUpload(ctx context.Context, dir string, files []string) error {
	var ok, refused []string
	for _, f := range files {
		if SafeArtifactPath(f) {
			ok = append(ok, f)
		} else {
			refused = append(refused, f)
		}
	}
	var errs []error
	if len(refused) > 0 {
		errs = append(errs, &UnsafeNamesError{Names: refused})
	}
	if len(ok) > 0 {
		errs = append(errs, a.upload(ctx, dir, strings.Join(ok, ";")))
	}
	return errors.Join(errs...)
}

// safeArtifactRule is what SafeArtifactPath accepts, in words.
const safeArtifactRule = "relative paths of letters, digits, '.', '_' and '-', no '..'"

// SafeArtifactPath reports whether p can be handed to `artifact upload`
// as a literal file name: a relative path whose components are letters,
// digits, '.', '_' and '-' only, none "." or "..". That leaves out the
// delimiter ';', every glob character (* ? [ ] { } ! and the \ escape),
// spaces, control characters and absolute paths.
func SafeArtifactPath(p string) bool {
	if p == "" || len(p) > 255 {
		return false
	}
	for _, part := range strings.Split(p, "/") {
		if part == "" || part == "." || part == ".." {
			return false
		}
		for _, c := range part {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
				return false
			}
		}
	}
	return true
}

// upload runs `artifact upload` at debug level and reads its output as it
// comes. The uploader of agents v3.50 to v3.52 reports its artifacts'
// states to Buildkite from a loop that sleeps a second after every round,
// the last included (agent/artifact_uploader.go), so every upload took 2 s
// however small, 1 s of it after Buildkite already had the final states.
// When the output shows that moment without an error, the process has
// nothing left but that sleep: it is killed and the upload counts as done.
// Any other output (a newer agent, an error, a format not recognised)
// leaves the process to finish on its own, as before.
func (a *Agent) upload(ctx context.Context, dir, patterns string) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, a.Path, uploadArgs(patterns)...)
	cmd.Dir, cmd.Env = dir, a.Env
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("running buildkite-agent artifact upload: %w", err)
	}
	defer r.Close()
	cmd.Stdout, cmd.Stderr = w, w
	err = cmd.Start()
	w.Close()
	if err != nil {
		return fmt.Errorf("running buildkite-agent artifact upload: %w", err)
	}
	var out strings.Builder
	if uploadDone(r, &out) {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil
	}
	return ranErr("buildkite-agent artifact upload", cmd.Wait(), withoutDebug(out.String()))
}

// uploadArgs asks for debug lines, without colour codes, and never for
// HTTP dumps, whatever the job's BUILDKITE_AGENT_DEBUG_HTTP says: at debug
// level those dumps would print request and response bodies, the storage
// upload's form fields among them, which must not reach a build log.
func uploadArgs(patterns string) []string {
	return []string{"artifact", "upload", "--debug", "--no-color", "--debug-http=false", patterns}
}

// statesSent is the v3.50–v3.52 uploader's debug line after a batch of
// states reached Buildkite: "Uploaded 1 artifact states (1/1)", the last
// batch when both counts are equal.
var statesSent = lazyre.New(`\bDEBUG +Uploaded [0-9]+ artifact states \(([0-9]+)/([0-9]+)\)`)

// uploadFailed is any line that says something went wrong: an ERROR or
// FATAL line, or the uploader's own words for a failed file or state.
var uploadFailed = lazyre.New(`^\S+ \S+ (ERROR|FATAL) |Error uploading artifact`)

// uploadDone copies the agent's output into out, line by line, until it
// ends (false) or a line says Buildkite has the final state of every
// artifact and no line before it said something failed (true).
func uploadDone(r io.Reader, out *strings.Builder) bool {
	br := bufio.NewReader(r)
	failed := false
	for {
		line, err := br.ReadString('\n')
		out.WriteString(line)
		failed = failed || uploadFailed.MatchString(line)
		if m := statesSent.FindStringSubmatch(line); m != nil && m[1] == m[2] && !failed {
			return true
		}
		if err != nil {
			return false
		}
	}
}

// withoutDebug drops the DEBUG lines that upload asked for, and the lines
// that continue one (a line without a log line's time stamp), so an error
// summary shows what the agent would have said by itself.
func withoutDebug(s string) string {
	var keep []string
	inDebug := false
	for _, l := range strings.Split(s, "\n") {
		if logLine.MatchString(l) {
			inDebug = debugLine.MatchString(l)
		}
		if !inDebug {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

var (
	logLine   = lazyre.New(`^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9:]{8} `)
	debugLine = lazyre.New(`^\S+ \S+ DEBUG `)
)
