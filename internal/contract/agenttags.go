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
	if len(ids) > MaxTaggedGPUs {
		return ""
	}
	for _, id := range ids {
		if !tagSafeID(id) {
			return ""
		}
	}
	return strings.Join(ids, GPUsTagSep)
}

// MaxTaggedGPUs is the most GPUs one agent's tag names (a node's GPUs).
const MaxTaggedGPUs = 16

// tagSafeID: 1 to 64 letters, digits and "-_.:/", the characters of every
// id GPUsTagValue writes (a UUID, a render node path).
func tagSafeID(id string) bool {
	return id != "" && len(id) <= 64 &&
		strings.Trim(id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:/") == ""
}

// GPUsFromTag is the GPUs a GPUsTag value names. The value comes from the
// agent's own registration (hostile like anything a node sends), so it is
// read to the grammar GPUsTagValue writes, whole or not at all: nil for
// any other value.
func GPUsFromTag(v string) []string {
	if v == "" {
		return nil
	}
	ids := strings.Split(v, GPUsTagSep)
	if len(ids) > MaxTaggedGPUs {
		return nil
	}
	for _, id := range ids {
		if !tagSafeID(id) {
			return nil
		}
	}
	return ids
}
