#!/usr/bin/env bash
# Smoke-test a runner image as the sandbox runs it: the built-in vectoradd
# example in test mode through the image's own kbgen, as uid 1000, read-only
# root, no network, tmpfs /work and /tmp, HOME=/tmp; the job's result must
# say it passed. No GPU needed (the example is plain Python).
#
#   scripts/smoke-image.sh ghcr.io/gpu-mode/kbgen-runner-cuda:12.8.1
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: scripts/smoke-image.sh IMAGE" >&2; exit 2; }
image=$1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
chmod 0777 "$out"
run() {
  docker run --rm --network none --read-only --user 1000:1000 \
    --tmpfs /work:exec --tmpfs /tmp:exec -e HOME=/tmp "$@"
}
echo "--- smoke: kbgen version in $image"
run "$image" /usr/local/bin/kbgen version
echo "--- smoke: kbgen run of the built-in vectoradd example in $image"
run "$image" /usr/local/bin/kbgen encode --example vectoradd --mode test > "$out/payload"
run -i -v "$out:/kbgen/out" "$image" \
  /usr/local/bin/kbgen run --payload-file - --out /kbgen/out/result.json --no-upload < "$out/payload"
# The image's own python reads the verdict: no jq needed on the host.
run -v "$out:/kbgen/out:ro" "$image" python3 -c '
import json, sys
r = json.load(open("/kbgen/out/result.json"))
runs = r.get("runs") or {}
ok = r.get("success") and runs and all(v["run"]["passed"] for v in runs.values())
print("smoke:", "passed" if ok else "FAILED", sorted(runs), r.get("error") or "")
sys.exit(0 if ok else 1)'
