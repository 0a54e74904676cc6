package resultfile

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/gpu-mode/kbgen/internal/atomicfile"
	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/payload"
)

// Write writes the FullResult JSON to out and each profile trace to
// profile_data/<run>.zip beside it, and returns the files written,
// relative to out's directory (result.json first). Each file is written
// to a new temporary file and renamed (internal/atomicfile), so a reader
// never sees half a result and nothing planted in the directory (a FIFO
// under either name) can block the writer.
func Write(out string, res *payload.FullResult) ([]string, error) {
	b, err := Marshal(res)
	if err != nil {
		return nil, err
	}
	if dir := filepath.Dir(out); dir != "." {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("writing result: %w", err)
		}
	}
	if err := atomicfile.Write(out, b, 0o644); err != nil {
		return nil, fmt.Errorf("writing result: %w", err)
	}
	files := []string{filepath.Base(out)}
	profiles, err := WriteProfiles(filepath.Dir(out), res)
	return append(files, profiles...), err
}

// WriteProfiles writes each profile trace in res to
// profile_data/<run>.zip under dir (the sandbox does the same from a
// sealed result) and returns them relative to dir.
func WriteProfiles(dir string, res *payload.FullResult) ([]string, error) {
	var files []string
	for key, r := range res.Runs {
		if r.Profile == nil || r.Profile.Trace == "" {
			continue
		}
		zipBytes, err := base64.StdEncoding.DecodeString(r.Profile.Trace)
		if err != nil {
			continue
		}
		p := filepath.Join(dir, contract.ProfileDir, key+".zip")
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return files, fmt.Errorf("writing profile: %w", err)
		}
		if err := atomicfile.Write(p, zipBytes, 0o644); err != nil {
			return files, fmt.Errorf("writing profile: %w", err)
		}
		files = append(files, contract.ProfileDir+"/"+key+".zip")
	}
	return files, nil
}

// Marshal is the result.json text: indented, and with <, > and &
// left as they are (Go would escape them; Python's json does not).
func Marshal(res *payload.FullResult) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(res); err != nil {
		return nil, fmt.Errorf("encoding result: %w", err)
	}
	return buf.Bytes(), nil
}

// List lists an existing result's files as Write returned
// them: out's name, then the profile traces in profile_data/ beside it.
func List(out string) []string {
	files := []string{filepath.Base(out)}
	zips, _ := filepath.Glob(filepath.Join(filepath.Dir(out), contract.ProfileDir, "*.zip"))
	for _, z := range zips {
		files = append(files, contract.ProfileDir+"/"+filepath.Base(z))
	}
	return files
}
