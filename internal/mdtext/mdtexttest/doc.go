// Package mdtexttest renders annotation markdown the way Buildkite does,
// for tests that attack it: CommonMark with GitHub's extensions (tables,
// autolinks, strikethrough) and raw HTML passed through, as Buildkite
// renders it before its sanitiser (buildkite/docs
// pages/pipelines/configure/annotations.md, "Supported Markdown syntax").
// goldmark is a CommonMark and GFM implementation; it stands in for
// Buildkite's renderer, which is not public.
package mdtexttest
