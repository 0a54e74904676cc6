// Package seal is the one authenticated channel out of the evaluation
// container: only what `kbgen run` itself produced can become a result.
//
// The sandbox makes a random Key per job and writes it to the container's
// stdin (`docker run -i`); `kbgen run --sealed` reads it before any
// submission process exists, keeps it only in memory (the process is
// non-dumpable, so the submission, same uid, cannot read its memory) and,
// at the end, writes one Envelope to its stdout: result.json and
// noise.json with an HMAC-SHA256 over both. The sandbox spools the
// container's stdout (bounded) and Opens it with the key: a result the
// submission forged, edited, truncated or replayed from another job does
// not verify, and the sandbox then writes its own failed result instead.
//
// The submission can write to the same stdout (through /proc/1/fd/1 of
// the container's init, which runs as its uid), so Open looks for a frame
// that verifies anywhere in the stream: junk around it costs the
// submission nothing but its own result when it breaks the runner's frame.
package seal
