// Package canary judges each agent's calibration canaries: the series of
// one agent's canary scores, split by context (driver, image digest, kbgen
// version, CPU model, power limit: a change starts a new baseline), a
// robust baseline per (agent, context) (median and MAD of the first quiet
// points), drift (robust z AND a material floor AND persistence), the
// agent's offset against agents of the same hardware fingerprint, and the
// change points in a history (E-divisive, Matteson & James 2014). It also
// says what serve submits as a canary (job.go) and how a finished canary
// becomes a Point (point.go). Pure: no I/O, no clock.
package canary
