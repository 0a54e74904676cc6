package sandbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/payload"
	"github.com/gpu-mode/kbgen/resultfile"
	"github.com/gpu-mode/kbgen/seal"
)

// spool keeps the container's stdout, where `kbgen run --sealed` writes
// its envelope, up to seal.MaxBytes; the rest is counted and dropped.
type spool struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	dropped int64
}

func (s *spool) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	room := seal.MaxBytes - s.buf.Len()
	if len(p) > room {
		s.dropped += int64(len(p) - room)
		s.buf.Write(p[:room])
	} else {
		s.buf.Write(p)
	}
	return len(p), nil
}

// Vouch is what the sandbox published for a `kbgen run`: the runner's own
// result when its sealed envelope verified, else the sandbox's failed
// result saying why.
type Vouch struct {
	// Verified: the files are the runner's, byte for byte.
	Verified bool
	// Reason says why nothing verified; it is the failed result's error.
	Reason string
	// Result is what result.json holds.
	Result *payload.FullResult
	// Files are the files written, relative to the out dir.
	Files []string
}

// vouch opens the sealed envelope in the spooled stdout and writes into
// dir what the sandbox vouches for: result.json and noise.json as the
// runner sealed them and the profile traces decoded from that result, or
// its own failed result.json. Nothing the container wrote anywhere else
// is read.
func vouch(dir string, key seal.Key, sp *spool, code int, end ending) (Vouch, error) {
	c, err := seal.Open(sp.buf.Bytes(), key)
	var v Vouch
	if err == nil {
		var res payload.FullResult
		if jerr := json.Unmarshal(c.Result, &res); jerr != nil {
			err = fmt.Errorf("the sealed result.json is not a FullResult: %v", jerr)
		} else {
			v = Vouch{Verified: true, Result: &res}
		}
	}
	if !v.Verified {
		v.Reason = unvouched(err, code, end, sp.dropped)
		v.Result = payload.Failed(payload.SystemInfo{}, errors.New(v.Reason))
		b, merr := resultfile.Marshal(v.Result)
		if merr != nil {
			return v, merr
		}
		c = seal.Contents{Result: b}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return v, fmt.Errorf("writing the vouched result: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, contract.ResultFile), c.Result, 0o644); err != nil {
		return v, fmt.Errorf("writing the vouched result: %w", err)
	}
	v.Files = []string{contract.ResultFile}
	if c.Noise != nil {
		if err := os.WriteFile(filepath.Join(dir, contract.NoiseFile), c.Noise, 0o644); err != nil {
			return v, fmt.Errorf("writing the vouched result: %w", err)
		}
		v.Files = append(v.Files, contract.NoiseFile)
	}
	profiles, err := resultfile.WriteProfiles(dir, v.Result)
	v.Files = append(v.Files, profiles...)
	return v, err
}

// unvouched is the sandbox's failed result's error: what came back, how
// the container ended (ending.describe: out of memory only when the
// engine says so), and that nothing the container wrote counts.
func unvouched(err error, code int, end ending, dropped int64) string {
	why := fmt.Sprintf("the container exited %d", code) + end.describe(code)
	if dropped > 0 {
		why += fmt.Sprintf(" after writing %d bytes more to stdout than the %d kept", dropped, seal.MaxBytes)
	}
	return fmt.Sprintf("kbgen sandbox: no result from kbgen run that the sandbox can verify: %s; %v. Nothing the container wrote is reported", why, err)
}

// removeVouched removes what an earlier run left in dir, so it cannot
// pass for this run's.
func removeVouched(dir string) error {
	for _, name := range []string{contract.ResultFile, contract.NoiseFile, contract.ProfileDir} {
		if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("removing an old %s: %w", name, err)
		}
	}
	return nil
}
