// Package jobenv is what an eval job on one agent of a node sees, to
// reproduce it by hand (`kbgen node env`): the agent's placement (package
// node) and the environment of the eval step the generator makes for the
// node's queue (package pipelinegen). It is the one place that needs both,
// so that node, qualify and the rest of the node tooling do not link the
// generator.
package jobenv
