// Package serve is kbgen serve: one long-running service that submits
// every Kernelbot run as a Buildkite build, watches all of them with one
// poller whose cost does not grow with the number in flight, takes
// Buildkite's webhooks as hints, keeps its API use under a budget, and
// resumes its builds after a restart by finding them through meta-data.
//
// A file per concept: wire.go (the JSON API's types), run.go (one run and
// its events), store.go (the runs by id and build), budget.go (the request
// budget), create.go (the create queue), watch.go (the poller), result.go
// (a finished build's FullResult), recover.go (startup), queues.go (the
// cached queue view), orphan.go (runs whose client went away), webhook.go,
// api.go (the HTTP handlers), remote.go (the Go client of the API).
package serve
