#!/usr/bin/env bash
# Build a kbgen release into dist/: static binaries for linux amd64 and arm64,
# their SHA-256 checksums and an SBOM per binary. The release pipeline
# (.buildkite/release.yml) runs it on a tag; it runs the same here:
#
#   scripts/release.sh v0.1.0
#
# dist/ then holds:
#   kbgen-v0.1.0-linux-amd64            static (CGO_ENABLED=0), -trimpath, stamped
#   kbgen-v0.1.0-linux-arm64            with version, commit and commit date
#   kbgen-v0.1.0-linux-ARCH.cdx.json    CycloneDX 1.5 SBOM read from the binary itself
#   kbgen-nvml-v0.1.0-linux-ARCH        the NVML helper (cgo, glibc 2.34+), install it
#   kbgen-nvml-v0.1.0-linux-ARCH.cdx.json  beside kbgen as kbgen-nvml; for each ARCH
#                                       whose C compiler is here (CC_arm64 names a
#                                       cross compiler, e.g. aarch64-linux-gnu-gcc)
#   kbgen-e2e-v0.1.0-linux-ARCH         static; `kbgen doctor --e2e` runs it (install
#   kbgen-e2e-v0.1.0-linux-ARCH.cdx.json  beside kbgen as kbgen-e2e): no Go on the node
#   kbgen-v0.1.0.intoto.jsonl           in-toto statement, SLSA provenance v1: every file
#                                       above by SHA-256, the commit, builder and inputs
#   SHA256SUMS                          sha256sum -c SHA256SUMS checks them all
#   SHA256SUMS.sig                      OpenSSH signature of SHA256SUMS (namespace
#                                       kbgen-release), when RELEASE_SIGNING_KEY names
#                                       the private key file; checked against
#                                       deployment/allowed_signers before it is kept
#
# Verify a release (no network; docs/operations.md#verifying-a-release):
#
#   ssh-keygen -Y verify -f deployment/allowed_signers -I kbgen-release \
#     -n kbgen-release -s SHA256SUMS.sig < SHA256SUMS && sha256sum -c SHA256SUMS
#
# Without RELEASE_SIGNING_KEY the release still builds, says loudly that it
# is unsigned, and writes no SHA256SUMS.sig. ALLOWED_SIGNERS=file checks the
# signature against another allowed-signers file (tests, forks).
#
# The date is the commit's, not the clock's, so the same commit builds the
# same bytes (check: run it twice and compare SHA256SUMS; across machines
# only the provenance line differs, since it names the builder). DIST=dir writes
# elsewhere; RELEASE_ARCHES="amd64" builds fewer.
set -euo pipefail

usage() { echo "usage: scripts/release.sh VERSION   (VERSION like v1.2.3 or v1.2.3-rc.1)" >&2; exit 2; }
[ $# -eq 1 ] || usage
version=$1
[[ $version =~ ^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] || { echo "release: $version is not a version like v1.2.3" >&2; usage; }

cd "$(dirname "$0")/.."
commit=${BUILDKITE_COMMIT:-$(git rev-parse HEAD)}
date=$(git log -1 --format=%cI "$commit")
dirty=""
if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
  dirty="+dirty"
  echo "release: warning: the working tree has uncommitted changes; the binaries say $version$dirty" >&2
fi
arches=${RELEASE_ARCHES:-"amd64 arm64"}
pkg=github.com/gpu-mode/kbgen/internal/version
ldflags="-s -w -X $pkg.Version=$version$dirty -X $pkg.Commit=$commit -X $pkg.Date=$date"

dist=${DIST:-dist}
rm -rf "$dist"
mkdir -p "$dist"
for arch in $arches; do
  bin="$dist/kbgen-$version-linux-$arch"
  echo "--- $bin"
  CGO_ENABLED=0 GOOS=linux GOARCH="$arch" GOFLAGS=-mod=readonly \
    go build -trimpath -buildvcs=false -ldflags "$ldflags" -o "$bin" ./cmd/kbgen
  # The SBOM tool refuses a binary that is not static and trimmed, so a
  # release can never carry one the sandbox would refuse (exit 75).
  go run ./scripts/sbom -version "$version$dirty" -commit "$commit" -date "$date" "$bin" > "$bin.cdx.json"

  # kbgen-e2e: what `kbgen doctor --e2e` runs, static like kbgen, so a
  # node checks itself end to end without a Go toolchain.
  e2e="$dist/kbgen-e2e-$version-linux-$arch"
  echo "--- $e2e"
  CGO_ENABLED=0 GOOS=linux GOARCH="$arch" GOFLAGS=-mod=readonly \
    go build -trimpath -buildvcs=false -ldflags "$ldflags" -o "$e2e" ./cmd/kbgen-e2e
  go run ./scripts/sbom -version "$version$dirty" -commit "$commit" -date "$date" "$e2e" > "$e2e.cdx.json"

  # kbgen-nvml needs cgo, so a C compiler for the arch: the host's own cc,
  # or CC_<arch> for a cross build. Without one the release still ships
  # (nodes fall back to nvidia-smi), and says so.
  helper="$dist/kbgen-nvml-$version-linux-$arch"
  cc_var="CC_$arch"
  cc=${!cc_var:-}
  if [ -z "$cc" ] && [ "$arch" = "$(go env GOHOSTARCH)" ]; then
    cc=$(command -v cc || true)
  fi
  if [ -z "$cc" ] || ! command -v "$cc" >/dev/null; then
    echo "release: warning: no C compiler for $arch (${cc:-set $cc_var}): no kbgen-nvml for $arch; its nodes read the GPU with nvidia-smi" >&2
    continue
  fi
  echo "--- $helper"
  CC="$cc" CGO_ENABLED=1 CGO_CFLAGS="-O2 -Wno-deprecated-declarations" GOOS=linux GOARCH="$arch" GOFLAGS=-mod=readonly \
    go build -trimpath -buildvcs=false -ldflags "-s -w" -o "$helper" ./cmd/kbgen-nvml
  go run ./scripts/sbom -version "$version$dirty" -commit "$commit" -date "$date" "$helper" > "$helper.cdx.json"
done
host="$dist/kbgen-$version-linux-$(go env GOHOSTARCH)"
if [ -f "$host" ]; then
  echo "--- smoke: $host version"
  said=$("$host" version)
  echo "$said"
  [[ $said == "kbgen $version$dirty ($commit, $date;"* ]] || { echo "release: $host says something else than $version$dirty at $commit" >&2; exit 1; }
fi
# kbgen serve's image (deployment/serve/Dockerfile, FROM scratch: the host
# arch's static kbgen and CA certificates), tagged kbgen-serve:VERSION in the
# local docker for the release pipeline to push; without docker, a warning.
if [ -f "$host" ] && command -v docker >/dev/null && docker info >/dev/null 2>&1; then
  echo "--- image kbgen-serve:$version${dirty:+-dirty}"
  deployment/serve/build-image.sh "$host" "kbgen-serve:$version${dirty:+-dirty}"
else
  echo "release: warning: no docker (or no $host): the kbgen-serve image is not built" >&2
fi
# The provenance names every file by hash; SHA256SUMS then lists it too,
# so the one signature covers binaries, SBOMs and provenance.
builder="local:$(id -un)@$(hostname 2>/dev/null || echo unknown)"
[ -n "${BUILDKITE_AGENT_NAME:-}" ] && builder="buildkite:${BUILDKITE_ORGANIZATION_SLUG:-}/queue=kbgen-release/${BUILDKITE_AGENT_NAME}"
go run ./scripts/provenance -version "$version$dirty" -commit "$commit" -date "$date" -arches "$arches" \
  -builder "$builder" -invocation "${BUILDKITE_BUILD_URL:-}" "$dist"/kbgen-* > "$dist/kbgen-$version.intoto.jsonl"
(cd "$dist" && sha256sum -- kbgen-* > SHA256SUMS && sha256sum -c --quiet SHA256SUMS)

# Sign SHA256SUMS with OpenSSH (no network, no keyserver): the key file
# stays on the release agent; its public half is in deployment/allowed_signers.
signers=${ALLOWED_SIGNERS:-deployment/allowed_signers}
if [ -n "${RELEASE_SIGNING_KEY:-}" ]; then
  [ -r "$RELEASE_SIGNING_KEY" ] || { echo "release: RELEASE_SIGNING_KEY=$RELEASE_SIGNING_KEY is not a readable file" >&2; exit 2; }
  echo "--- signing $dist/SHA256SUMS (ssh-keygen -Y sign, namespace kbgen-release)"
  ssh-keygen -q -Y sign -f "$RELEASE_SIGNING_KEY" -n kbgen-release "$dist/SHA256SUMS"
  # A key the allowed signers do not list would make a release no node
  # installs: check before it ships.
  if ! ssh-keygen -Y verify -f "$signers" -I kbgen-release -n kbgen-release -s "$dist/SHA256SUMS.sig" <"$dist/SHA256SUMS"; then
    rm -f "$dist/SHA256SUMS.sig"
    echo "release: the signature does not verify against $signers: is RELEASE_SIGNING_KEY the key listed there?" >&2
    exit 1
  fi
else
  {
    echo "release: ************************************************************"
    echo "release: UNSIGNED RELEASE: RELEASE_SIGNING_KEY is not set, so there is no"
    echo "release: $dist/SHA256SUMS.sig and setup-node.sh refuses these binaries"
    echo "release: unless ALLOW_UNSIGNED=1. Do not publish it."
    echo "release: ************************************************************"
  } >&2
fi
echo "--- $dist/"
ls -l "$dist"
