// Package alert is kbgen serve's own alerting: conditions it sees (a
// queue stuck, an agent lost, an agent's machine faults) become alarms
// with a stable id that fire after they have held for a while and resolve
// when they stop; each FIRING and RESOLVED goes to the channels routed
// for its queue (a Slack-compatible incoming webhook or a generic JSON
// webhook), at most one message a second per channel, through a delivery
// ledger: a message is written down before it is sent and marked once
// the channel took it, so a restart resends what was not delivered and
// nothing that was.
package alert
