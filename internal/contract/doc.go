// Package contract holds the names and small types that two or more of
// kbgen's parts must agree on: the build-env and agent-env variables, the
// step keys and artifact names of a kbgen build, and the GPU runtime words.
// Each is defined here once; every package that reads or writes one uses
// these constants, so a rename is one edit and a grep finds every use. See
// docs/architecture.md#contracts-and-where-each-one-lives.
package contract
