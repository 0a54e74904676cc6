#!/usr/bin/env bash
# The end-to-end suite alone: real `buildkite-agent start` processes (two
# GPU agents rendered by `kbgen node install`, one control agent with the
# signing key) take every job from the local Buildkite (internal/fakebuildkite
# live mode); real Docker, real kbgen. See docs/testing.md.
#
# Needs docker, buildkite-agent v3.52.1 and git; the runner image is built
# with debootstrap on first use (KBGEN_TEST_PYTHON_IMAGE=1, set here). A test
# whose tool is missing skips and says why. Ends with "N passed, M failed".
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
export KBGEN_TEST_PYTHON_IMAGE=1

log=$(mktemp -t kbgen-e2e.XXXXXX.log)
# Every test of internal/e2e (the serve suite's too), and the local
# Buildkite's own tests with real agents.
go test -count=1 -v -timeout 8m ./internal/e2e/ >"$log" 2>&1
status=$?
go test -count=1 -v -timeout 3m -run '^TestLive' ./internal/fakebuildkite/ >>"$log" 2>&1 || status=1

# Failures in full (their agents' logs come with them), skips with reasons.
awk '/^--- FAIL/ {p=1} /^(=== RUN|--- PASS|--- SKIP|PASS|ok )/ {p=0} p' "$log"
grep -A2 '^--- SKIP' "$log" || true
grep -E '^(ok|FAIL|---)' "$log" | grep -v -- '--- PASS' || true
passed=$(grep -c '^--- PASS' "$log")
failed=$(grep -c '^--- FAIL' "$log")
skipped=$(grep -c '^--- SKIP' "$log")
if [ "$status" -ne 0 ] && [ "$failed" -eq 0 ]; then
  # A build error or a timeout fails no single test: show the log's end.
  tail -n 40 "$log"
  failed=1
fi
echo "full log: $log ($skipped skipped)"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
