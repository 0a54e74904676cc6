// Package canary judges an agent's calibration times (one kernel, the
// same on every agent, measured on a schedule): drift against the agent's
// own baseline, an offset against agents of the same hardware, and
// change points in its history. Pure statistics over points serve
// records; it runs nothing.
//
// Drift needs all three of: a robust z-score (Iglewicz and Hoaglin's
// modified z, 0.6745·(x − median)/MAD) past Policy.Z against the median
// and MAD of at least Policy.MinBaseline quiet earlier points; a relative
// change of at least Policy.Floor (a tiny MAD alone never raises one); and
// Policy.Consecutive such points in a row, in the same direction (one slow
// run is not drift).
package canary
