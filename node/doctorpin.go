package node

import (
	"bytes"
	"io/fs"
	"path"
	"strings"

	"github.com/gpu-mode/kbgen"
	"github.com/gpu-mode/kbgen/sandbox"
)

// checkStatic fails a kbgen the sandbox could not mount into a runner
// image: a dynamically linked one makes every step exit 75.
func (d *Doctor) checkStatic() Check {
	const name = "kbgen static binary"
	if d.Kbgen == "" {
		return Check{Name: name, Skipped: true, Detail: "skipped: no kbgen binary given"}
	}
	if err := sandbox.CheckStatic(d.Kbgen); err != nil {
		return fail(name, "%v: every step would exit 75; install a release binary or run deployment/setup-node.sh", err)
	}
	return pass(name, "%s is statically linked (the sandbox mounts it into the runner image)", d.Kbgen)
}

// checkPluginPin fails a node whose agents would run the gpu-docker hook a
// build checks out: the pinned copy must be installed, be the plugin this
// kbgen carries (or d.Plugin), and every agent must have the post-checkout
// hook that puts it in place.
func (d *Doctor) checkPluginPin(p *Plan) Check {
	const name = "gpu-docker plugin pin"
	want := d.Plugin
	if want == nil {
		want = kbgen.GPUDockerPlugin()
	}
	var problems []string
	err := fs.WalkDir(want, ".", func(f string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		w, err := fs.ReadFile(want, f)
		if err != nil {
			return err
		}
		installed := path.Join(PluginDir, f)
		got, err := fs.ReadFile(d.Root, strings.TrimPrefix(installed, "/"))
		switch {
		case err != nil:
			problems = append(problems, installed+" missing")
		case !bytes.Equal(got, w):
			problems = append(problems, installed+" differs from this kbgen's plugin")
		}
		return nil
	})
	if err != nil {
		return fail(name, "reading the plugin: %v", err)
	}
	for _, a := range p.Agents {
		hook := path.Join(ConfigDir, a.ID, "hooks", "post-checkout")
		if _, err := fs.Stat(d.Root, strings.TrimPrefix(hook, "/")); err != nil {
			problems = append(problems, hook+" missing")
		}
	}
	if len(problems) > 0 {
		return fail(name, "%s: builds would run the hook they check out; re-run kbgen node install (or deployment/setup-node.sh)", strings.Join(problems, "; "))
	}
	return pass(name, "%s is this kbgen's plugin; %d agents put it in place after checkout", PluginDir, len(p.Agents))
}
