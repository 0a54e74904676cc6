package kbgen

import _ "embed"

// PipelineSettings is .buildkite/pipeline-settings.yml: the steps the
// operator pastes into the pipeline's settings (docs/buildkite-setup.md),
// the bootstrap on the control queue (contract.ControlQueue). Builds on the
// real organisation start from these, never from a checkout's file, so a
// commit cannot decide what runs next to the signing key; the operator's
// rehearsal (kbgen-e2e buildkite) starts its builds from them too.
//
//go:embed .buildkite/pipeline-settings.yml
var PipelineSettings []byte
