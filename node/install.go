package node

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
)

// Change is what installing one file did (or would do).
type Change string

const (
	Created   Change = "created"
	Updated   Change = "updated"
	Unchanged Change = "unchanged"
)

// Result is one file's outcome.
type Result struct {
	Path   string
	Mode   fs.FileMode
	Change Change
}

// Apply writes files under root. A file whose content and mode already
// match is not touched (its mtime stays), so a second install changes
// nothing; the others are replaced atomically. With dryRun nothing is
// written and the results say what would happen.
func Apply(root string, files []File, dryRun bool) ([]Result, error) {
	if root == "" {
		root = "/"
	}
	results := make([]Result, 0, len(files))
	for _, f := range files {
		target := filepath.Join(root, filepath.FromSlash(f.Path))
		own, err := lookupOwner(root, f)
		if err != nil {
			return results, err
		}
		change, err := compare(target, f, own)
		if err != nil {
			return results, err
		}
		results = append(results, Result{Path: f.Path, Mode: f.Mode, Change: change})
		if dryRun || change == Unchanged {
			continue
		}
		if err := writeAtomic(target, f, own); err != nil {
			return results, err
		}
	}
	return results, nil
}

// owner is the uid and gid a file must have; nil: whoever writes it.
type owner struct{ uid, gid int }

// lookupOwner resolves f.Owner on a real install (root "/"); a staging
// tree keeps the installer's ownership, since nothing runs from it as
// that user.
func lookupOwner(root string, f File) (*owner, error) {
	if f.Owner == "" || filepath.Clean(root) != "/" {
		return nil, nil
	}
	u, err := user.Lookup(f.Owner)
	if err != nil {
		return nil, fmt.Errorf("%s must belong to user %s: %w (install the buildkite-agent package first, or pass --user)", f.Path, f.Owner, err)
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("user %s: %w", f.Owner, err)
	}
	return &owner{uid: uid, gid: gid}, nil
}

func compare(target string, f File, own *owner) (Change, error) {
	fi, err := os.Lstat(target)
	if errors.Is(err, fs.ErrNotExist) {
		return Created, nil
	}
	if err != nil {
		return "", fmt.Errorf("checking %s: %w", target, err)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%s exists and is not a regular file; move it away and re-run", target)
	}
	if fi.Mode().Perm() != f.Mode || !ownedBy(fi, own) {
		return Updated, nil
	}
	old, err := os.ReadFile(target)
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", target, err)
	}
	if !bytes.Equal(old, f.Data) {
		return Updated, nil
	}
	return Unchanged, nil
}

// writeAtomic writes through a temporary file in the same directory, so
// an agent (re)starting mid-install never reads half a config, and a
// secret is never readable by others even for a moment.
func writeAtomic(target string, f File, own *owner) error {
	dir := filepath.Dir(target)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	tmp, err := os.CreateTemp(dir, ".kbgen-*") // created 0600
	if err != nil {
		return fmt.Errorf("writing %s: %w", target, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(f.Data); err != nil {
		tmp.Close()
		return fmt.Errorf("writing %s: %w", target, err)
	}
	if err := tmp.Chmod(f.Mode); err != nil {
		tmp.Close()
		return fmt.Errorf("writing %s: %w", target, err)
	}
	if own != nil {
		if err := tmp.Chown(own.uid, own.gid); err != nil {
			tmp.Close()
			return fmt.Errorf("writing %s: %w", target, err)
		}
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("writing %s: %w", target, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", target, err)
	}
	if err := os.Rename(tmp.Name(), target); err != nil {
		return fmt.Errorf("writing %s: %w", target, err)
	}
	return nil
}

// ReadInstalledPlan reads the plan a previous install wrote under root.
func ReadInstalledPlan(root string) (*Plan, error) {
	if root == "" {
		root = "/"
	}
	data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(PlanFile)))
	if err != nil {
		return nil, fmt.Errorf("reading installed plan: %w (run kbgen node install first)", err)
	}
	return ParsePlan(data)
}

// StaleAgents lists installed agent directories under ConfigDir (named
// as the planner names agents: gpu3, gpu3-mig0, gpux8-0) that plan p no
// longer has: a GPU removed or gone, a shape or MIG queue no longer
// asked for. Their units must be disabled before the directories go, or
// systemd would restart an agent for a GPU that is not there, or keep a
// shape agent taking jobs on GPUs the plan gave back.
func StaleAgents(root string, p *Plan) ([]string, error) {
	if root == "" {
		root = "/"
	}
	entries, err := os.ReadDir(filepath.Join(root, filepath.FromSlash(ConfigDir)))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing installed agents: %w", err)
	}
	planned := map[string]bool{}
	for _, a := range p.Agents {
		planned[a.ID] = true
	}
	var stale []string
	for _, e := range entries {
		if e.IsDir() && agentID.MatchString(e.Name()) && !planned[e.Name()] {
			stale = append(stale, e.Name())
		}
	}
	return stale, nil
}

// ownedBy reports whether fi belongs to own (always, when own is nil).
func ownedBy(fi fs.FileInfo, own *owner) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return own == nil || ok && int(st.Uid) == own.uid && int(st.Gid) == own.gid
}
