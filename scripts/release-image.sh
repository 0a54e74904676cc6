#!/usr/bin/env bash
# Build, smoke-test and (with --push) push one runner image for a release.
# The release pipeline runs it per flavour (.buildkite/release.yml):
#
#   scripts/release-image.sh cuda v0.1.0           # build + smoke test
#   scripts/release-image.sh --push cuda v0.1.0    # and push; writes dist/images/cuda.ref
#
# Tags: the Dockerfile's declared ref (# image: …-cuda:12.8.1, the one the
# vendor registry names) and an immutable per-release ref (…:12.8.1-v0.1.0).
# Nodes never run a tag: scripts/pin-images.sh registry pins the registry to
# the pushed digest afterwards. Extra build args (an offline base, a proxy)
# come from RELEASE_BUILD_ARGS, e.g. "--build-arg GOPROXY=http://…".
set -euo pipefail

push=0
if [ "${1:-}" = --push ]; then push=1; shift; fi
[ $# -eq 2 ] || { echo "usage: scripts/release-image.sh [--push] cuda|rocm VERSION" >&2; exit 2; }
flavour=$1 version=$2
cd "$(dirname "$0")/.."
df=images/$flavour/Dockerfile
[ -f "$df" ] || { echo "release-image: no $df" >&2; exit 2; }
ref=$(sed -n 's/^# image: //p' "$df")
commit=${BUILDKITE_COMMIT:-$(git rev-parse HEAD)}
date=$(git log -1 --format=%cI "$commit")

echo "--- build $ref ($df)"
# shellcheck disable=SC2086 # RELEASE_BUILD_ARGS is a list of flags
docker build -f "$df" \
  --build-arg KBGEN_VERSION="$version" --build-arg KBGEN_COMMIT="$commit" --build-arg KBGEN_DATE="$date" \
  ${RELEASE_BUILD_ARGS:-} -t "$ref" -t "$ref-$version" .
scripts/smoke-image.sh "$ref"

if [ "$push" = 1 ]; then
  echo "--- push $ref, $ref-$version"
  docker push "$ref"
  docker push "$ref-$version"
  mkdir -p dist/images
  docker inspect --format '{{index .RepoDigests 0}}' "$ref" | tee "dist/images/$flavour.ref"
fi
