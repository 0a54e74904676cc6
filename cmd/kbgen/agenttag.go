package main

import "os"

// agentHostname is the host name `kbgen node install` puts in each agent's
// kbgen-agent tag: os.Hostname, as the agent expands %hostname in its name
// (buildkite-agent's agent/agent_configuration.go); "" (no tag) when the
// system will not say.
func agentHostname() string {
	h, err := os.Hostname()
	if err != nil {
		return ""
	}
	return h
}
