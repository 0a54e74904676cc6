// Package metrics is kbgen serve's Prometheus series: one Recorder with
// its own registry (no Go runtime or process series unless asked, so a
// scrape is kbgen's fleet only), counters and classic histograms fed by
// serve's hooks as things happen, and gauges read from a Snapshot at
// scrape time. Every label is bounded: queues and outcomes are the
// registry's and kbgen's own words, agents are capped at MaxAgents, and
// every value is cleaned (runfacts.Text). docs/operations.md#watching-the-fleet
// lists the series and what they mean.
package metrics
