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
#   SHA256SUMS                          sha256sum -c SHA256SUMS checks them all
#
# The date is the commit's, not the clock's, so the same commit builds the
# same bytes (check: run it twice and compare SHA256SUMS). DIST=dir writes
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
(cd "$dist" && sha256sum -- kbgen-* > SHA256SUMS && sha256sum -c --quiet SHA256SUMS)
echo "--- $dist/"
ls -l "$dist"
