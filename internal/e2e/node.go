package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/gpu-mode/kbgen/node"
)

// NodeAgent is one GPU agent of a node set up by `kbgen node install`.
type NodeAgent struct {
	Plan   node.Agent
	Queue  string
	Config string   // its buildkite-agent.cfg
	Env    []string // its agent.env, which systemd loads into the agent
}

// ReadNode reads the plan `kbgen node install --root root` wrote and each
// agent's config.
func ReadNode(root string) ([]NodeAgent, error) {
	data, err := os.ReadFile(filepath.Join(root, node.PlanFile))
	if err != nil {
		return nil, fmt.Errorf("no node installed under %s (run kbgen node install): %w", root, err)
	}
	plan, err := node.ParsePlan(data)
	if err != nil {
		return nil, err
	}
	var out []NodeAgent
	for _, a := range plan.Agents {
		dir := filepath.Join(root, node.ConfigDir, a.ID)
		na := NodeAgent{Plan: a, Queue: plan.Queue, Config: filepath.Join(dir, "buildkite-agent.cfg")}
		if na.Env, err = readEnvFile(filepath.Join(dir, "agent.env")); err != nil {
			return nil, err
		}
		out = append(out, na)
	}
	return out, nil
}

func readEnvFile(path string) ([]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var env []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") || !strings.Contains(line, "=") {
			continue
		}
		env = append(env, line)
	}
	return env, sc.Err()
}

// PrepareHooks copies the agent's hooks (environment, post-checkout) into
// dir/hooks. Under a staging root the copies point at the root's pinned
// plugin and verification key instead of the node paths the hooks were
// rendered for; under / they are the hooks as installed.
func (na NodeAgent) PrepareHooks(root, dir string) error {
	src := filepath.Join(root, node.ConfigDir, na.Plan.ID, "hooks")
	dst := filepath.Join(dir, "hooks")
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	pinned := filepath.Join(root, node.PluginDir)
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			return err
		}
		b = bytes.ReplaceAll(b, []byte(node.PluginDir), []byte(pinned))
		b = bytes.ReplaceAll(b, []byte(node.JWKSFile), []byte(filepath.Join(root, node.JWKSFile)))
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o755); err != nil {
			return err
		}
	}
	return nil
}
