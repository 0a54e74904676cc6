#!/usr/bin/env bash
# Pin images by digest, resolved from the registry, never typed.
#
#   scripts/pin-images.sh bases             # every base image ARG in images/*/Dockerfile
#   scripts/pin-images.sh registry          # every runner image in registry/vendors.yaml
#   scripts/pin-images.sh --verify bases    # change nothing; exit 1 unless every pinned digest exists
#
# bases: each `ARG X_IMAGE=name:tag@sha256:…` (or without a digest) gets the
# digest its tag points to now: bump the tag in the Dockerfile, run this,
# commit both. registry: each `image: ref[@sha256:…]` line gets the digest of
# the pushed ref (the release pipeline runs it after pushing, .buildkite/release.yml).
#
# Resolves with `crane digest` when crane is on PATH, else
# `docker buildx imagetools inspect`; either needs the registry reachable.
set -euo pipefail

verify=0
if [ "${1:-}" = --verify ]; then verify=1; shift; fi
what=${1:-}
case "$what" in
  bases|registry) ;;
  *) echo "usage: scripts/pin-images.sh [--verify] bases|registry" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.."

# digest REF prints the sha256:… REF resolves to (name:tag, or name:tag@sha256:…).
digest() {
  local ref=$1
  if command -v crane >/dev/null 2>&1; then
    crane digest "$ref"
  elif docker buildx version >/dev/null 2>&1; then
    docker buildx imagetools inspect "$ref" --format '{{json .Manifest.Digest}}' | tr -d '"'
  else
    echo "pin-images: neither crane nor docker buildx is installed: cannot ask the registry for $ref" >&2
    return 1
  fi
}

# pin FILE PREFIX-REGEX: rewrite each REF after the prefix to REF@digest.
missing=0
pin() {
  local file=$1 prefix=$2 line ref name d new
  while IFS= read -r line; do
    ref=$(sed -E "s/^${prefix}//" <<<"$line")
    name=${ref%@*}
    [[ $name =~ ^[a-z0-9./_-]+(:[A-Za-z0-9._-]+)$ ]] || continue  # a stage name, not an image
    if [ "$verify" = 1 ]; then
      if [ "$name" = "$ref" ]; then
        echo "unpinned   $file: $ref"; missing=1
      elif [ "$(digest "$ref" 2>/dev/null)" = "${ref#*@}" ]; then
        echo "exists     $file: $ref"
      else
        echo "missing    $file: $ref is not in the registry"; missing=1
      fi
      continue
    fi
    d=$(digest "$name") || exit 1
    [[ $d =~ ^sha256:[0-9a-f]{64}$ ]] || { echo "pin-images: $name: registry answered '$d', not a digest" >&2; exit 1; }
    new="$name@$d"
    [ "$new" = "$ref" ] && { echo "unchanged  $file: $new"; continue; }
    # | as the sed delimiter: refs hold / and : but never |.
    sed -i -E "s|^(${prefix})${ref//./\\.}\$|\\1${new}|" "$file"
    echo "pinned     $file: $new"
  done < <(grep -E "^${prefix}" "$file")
}

if [ "$what" = bases ]; then
  for df in images/*/Dockerfile; do
    pin "$df" 'ARG [A-Z_]+_IMAGE='
  done
else
  pin registry/vendors.yaml '    image: '
fi
if [ "$missing" = 1 ]; then
  echo "pin-images: a pinned image is missing from the registry (or not pinned): run scripts/pin-images.sh $what and commit" >&2
  exit 1
fi
