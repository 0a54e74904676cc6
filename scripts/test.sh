#!/usr/bin/env bash
# All of kbgen's tests: formatting, vet, the race-enabled test suite, and a
# bounded run of every fuzz target. Tests that need a tool this machine lacks
# (docker, buildkite-agent, python3, shellcheck, systemd-analyze) skip with a
# message saying what was not run; .ci/run installs those tools first.
set -euo pipefail
cd "$(dirname "$0")/.."
# go-nvml's generated cgo (nvmlhelper/nvmlserve, cmd/kbgen-nvml) calls NVML
# functions nvml.h marks deprecated; gcc's warnings about them say nothing
# about kbgen.
export CGO_CFLAGS="${CGO_CFLAGS:--O2 -g -Wno-deprecated-declarations}"

unformatted=$(git ls-files -z '*.go' | xargs -0 gofmt -l)
if [ -n "$unformatted" ]; then
  echo "gofmt would change:"; echo "$unformatted"; exit 1
fi
go vet ./...

# staticcheck, pinned: the installed one when it is this version (.ci/run
# installs it), else built once through the module proxy (go run caches it).
staticcheck_version=0.8.2
if [[ "$(staticcheck -version 2>/dev/null)" == *"($staticcheck_version)"* ]]; then
  staticcheck ./...
else
  go run "honnef.co/go/tools/cmd/staticcheck@v$staticcheck_version" ./...
fi

# -count=1: the Docker- and agent-backed tests depend on state Go's test
# cache cannot see. The summary shows failures in full and every skip with
# its reason (what could not be run on this machine).
# The end-to-end suite (internal/e2e) runs on its own afterwards: it starts
# agents and containers on both cores and times heartbeats, so it does not
# share the machine with the rest.
mapfile -t pkgs < <(go list ./... | grep -v /internal/e2e)
go test -race -count=1 -timeout 20m -json "${pkgs[@]}" | python3 scripts/gotest-summary.py
bash scripts/e2e.sh

# Exploration beyond the committed corpus: a new finding is printed with
# its reproducer (in a box, at the end) but does not fail this run, so the
# same commit passes or fails the same way every time (scripts/fuzz.sh).
FUZZ_FINDINGS=report scripts/fuzz.sh
