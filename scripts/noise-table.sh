#!/usr/bin/env bash
# Reproduces issue 12's table with real containers through `kbgen sandbox`:
# a CPU-bound calibration job (RUNS runs of REPS repetitions of ~REP_MS,
# each run with a noise record) on a 2-CPU machine, in four conditions:
#
#   quiet          job pinned to CPU 1, nothing else started
#   pinned+1       job on CPU 1, one neighbour (CPU + memory load) on CPU 0
#   oversubscribed job on CPU 1, two neighbours on CPU 0
#   floating       job and two neighbours all on CPUs 0-1, the job unpinned
#
# and prints, per condition, the run-to-run CV, the mean shift against quiet,
# the worst steal, how many runs had steal above 5 % and whether their noise
# records flagged every one noisy, and the slow outliers (> 1.2 x the quiet
# median) with how many of them were flagged.
#
#   bash scripts/noise-table.sh                 # RUNS=40 REPS=10 REP_MS=12
#   RUNS=10 bash scripts/noise-table.sh         # quicker
#
# Needs docker and Go; IMAGE is any image (kbgen is mounted into it), by
# default a busybox image imported from /bin/busybox (apt-get install
# busybox-static).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-40}
REPS=${REPS:-10}
REP_MS=${REP_MS:-12}

tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

CGO_ENABLED=0 go build -o "$tmp/kbgen" ./cmd/kbgen
if [ -z "${IMAGE:-}" ]; then
  IMAGE=kbgen-noise-table-busybox:1
  if ! docker image inspect "$IMAGE" >/dev/null 2>&1; then
    mkdir -p "$tmp/img/bin" "$tmp/img/tmp" "$tmp/img/work"
    cp /bin/busybox "$tmp/img/bin/busybox"
    ln -s busybox "$tmp/img/bin/sh"
    tar -C "$tmp/img" -c . | docker import - "$IMAGE" >/dev/null
  fi
fi
export KERNELBOT_MEMS=0 KERNELBOT_MEMORY=1g
export BUILDKITE_PLUGIN_GPU_DOCKER_IMAGE=$IMAGE BUILDKITE_PLUGIN_GPU_DOCKER_RUNTIME=nvidia

# The work per repetition is fixed once, here, so every condition runs the
# same kernel.
iters=$("$tmp/kbgen" node calibrate --runs 1 --reps 1 --cpus 1 | sed 's/.*"iterations":\([0-9]*\).*/\1/')
iters=$(( iters * REP_MS / 12 ))

job() { # CPUSET NAME [calibrate flags]
  local cpus=$1 name=$2
  shift 2
  echo "noise-table: $name: job on CPUs $cpus" >&2
  KERNELBOT_CPUSET=$cpus "$tmp/kbgen" sandbox --no-gpu -- kbgen node calibrate \
    --runs "$RUNS" --reps "$REPS" --iterations "$iters" "$@" >"$tmp/$name.json"
}
neighbour() { # CPUSET
  KERNELBOT_CPUSET=$1 "$tmp/kbgen" sandbox --no-gpu -- kbgen node calibrate --load --duration 1800s >/dev/null 2>&1 &
  pids+=($!)
  sleep 2
}
stop_neighbours() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  pids=()
}

job 1 quiet
neighbour 0; job 1 pinned+1; stop_neighbours
neighbour 0; neighbour 0; job 1 oversubscribed; stop_neighbours
neighbour 0-1; neighbour 0-1; job 0-1 floating --no-pin; stop_neighbours

python3 - "$tmp" "$RUNS" "$REPS" "$REP_MS" <<'PY'
import json, statistics, sys
tmp, runs, reps, rep_ms = sys.argv[1], *sys.argv[2:]
conds = ["quiet", "pinned+1", "oversubscribed", "floating"]
data = {c: json.load(open(f"{tmp}/{c}.json")) for c in conds}
quiet = [r["mean_ms"] for r in data["quiet"]["runs"]]
qmean, qmed = statistics.mean(quiet), statistics.median(quiet)
print(f"{runs} runs x {reps} repetitions of ~{rep_ms} ms ({data['quiet']['iterations']} kernel steps) per condition\n")
print("| condition | run-to-run CV | mean shift vs quiet | max steal | runs with steal > 5 % (flagged noisy) | slow outliers > 1.2x quiet median (flagged noisy) | noisy runs |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for c in conds:
    rs = data[c]["runs"]
    ms = [r["mean_ms"] for r in rs]
    cv = 100 * statistics.stdev(ms) / statistics.mean(ms)
    shift = "—" if c == "quiet" else f"{100 * (statistics.mean(ms) - qmean) / qmean:+.1f} %"
    steal = [r for r in rs if r["steal_percent"] > 5]
    out = [r for r in rs if r["mean_ms"] > 1.2 * qmed]
    noisy = sum(r.get("verdict") == "noisy" for r in rs)
    flag = lambda xs: sum(r.get("verdict") == "noisy" for r in xs)
    print(f"| {c} | {cv:.1f} % | {shift} | {max(r['steal_percent'] for r in rs):.1f} % | {len(steal)} ({flag(steal)}) | {len(out)} ({flag(out)}) | {noisy}/{len(rs)} |")
PY
