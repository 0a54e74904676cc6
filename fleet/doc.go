// Package fleet holds what kbgen serve knows of the fleet it drives: the
// per-run facts each result carries (runfacts), and the Prometheus series
// made from them and from the service's own state (metrics). Each
// subpackage has one job; serve feeds them through small hooks.
package fleet
