#!/usr/bin/env bash
# Build kbgen serve's container image from a static kbgen binary:
#
#   deployment/serve/build-image.sh dist/kbgen-v0.1.0-linux-amd64 kbgen-serve:v0.1.0
#
# The image is FROM scratch (no pull, no registry): the binary, the host's CA
# bundle (CA_BUNDLE=file to use another) and an empty spill directory owned by
# the service's user. scripts/release.sh runs it; so does deployment/serve's test.
set -euo pipefail

[ $# -eq 2 ] || { echo "usage: build-image.sh KBGEN_BINARY TAG" >&2; exit 2; }
bin=$1 tag=$2
ca=${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
here=$(cd "$(dirname "$0")" && pwd)
[ -x "$bin" ] || { echo "build-image.sh: $bin is not an executable" >&2; exit 2; }
[ -s "$ca" ] || { echo "build-image.sh: no CA bundle at $ca (apt-get install ca-certificates, or CA_BUNDLE=file)" >&2; exit 2; }
# A dynamic binary would not start FROM scratch: refuse it here, not at the first run.
if file "$bin" 2>/dev/null | grep -q "dynamically linked"; then
  echo "build-image.sh: $bin is dynamically linked; build it with CGO_ENABLED=0" >&2
  exit 2
fi

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
cp "$here/Dockerfile" "$ctx/Dockerfile"
cp "$bin" "$ctx/kbgen"
cp "$ca" "$ctx/ca-certificates.crt"
chmod 0755 "$ctx/kbgen"
chmod 0644 "$ctx/ca-certificates.crt"
mkdir "$ctx/spill"
docker build --quiet --tag "$tag" "$ctx"
