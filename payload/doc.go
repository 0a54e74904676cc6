// Package payload is the wire contract with Kernelbot in both directions:
// the job config (encode, decode, validate, size rules) and the FullResult
// that comes back. It is pure: no I/O beyond the readers it is handed.
package payload
