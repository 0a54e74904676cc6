// Package alert turns what kbgen serve knows of its fleet into alarms and
// delivers them: a snapshot of facts (Facts) is judged by the conditions
// (conditions.go), an alarm fires once a condition has held for its
// duration and resolves when it no longer holds (Evaluator), each
// transition is routed to the receivers configured for its vendor and
// queue (Config), written to a ledger before it is sent (Ledger: kbgen
// serve's store, fleet/store, or a MemoryLedger without one), and sent at
// most once a second per Slack receiver, retried with backoff while a
// receiver is down (Alerter.Flush). A restart reloads the ledger: what
// was pending is sent, what was sent is not sent again, and a firing
// alarm is not fired again. A data source that is not wired (the canary
// input, CanarySource, without kbgen serve --canary-every) produces no
// alarms; image pre-pulls come from the run facts' ImagePulled
// (fleet/hostfacts asks the node's docker), the latest per node and
// queue (Recent).
// docs/operations.md#alerts-and-routing describes the conditions.
package alert
