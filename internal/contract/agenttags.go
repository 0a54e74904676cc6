package contract

import "strings"

// The agent's identity as `kbgen node install` tags it beside AgentTag,
// so that kbgen serve learns an installed agent's node and GPUs from
// Buildkite's agent list (its meta_data) before it runs any job:
// NodeTag's value is the host name, GPUsTag's the agent's GPUs as its
// placement names them (NVIDIA UUIDs "GPU-…"/"MIG-…", AMD render nodes),
// joined by GPUsTagSep (a tag list is comma-separated, so a comma cannot
// join them).
const (
	NodeTag    = "kbgen-node"
	GPUsTag    = "kbgen-gpus"
	GPUsTagSep = "+"
)

// GPUsTagValue is GPUsTag's value for ids; "" when any id could not be
// carried by a tag (empty, or a character outside letters, digits and
// "-_.:/").
func GPUsTagValue(ids []string) string {
	for _, id := range ids {
		if id == "" || strings.Trim(id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:/") != "" {
			return ""
		}
	}
	return strings.Join(ids, GPUsTagSep)
}

// GPUsFromTag is the GPUs a GPUsTag value names.
func GPUsFromTag(v string) []string {
	var out []string
	for _, id := range strings.Split(v, GPUsTagSep) {
		if id = strings.TrimSpace(id); id != "" {
			out = append(out, id)
		}
	}
	return out
}
