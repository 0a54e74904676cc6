//go:build race

package serve

// raceEnabled: the race detector slows byte loops (JSON of megabytes)
// tenfold; tests that move large results use smaller ones under it.
const raceEnabled = true
