#!/usr/bin/env bash
# The GPU checklist of docs/testing.md, on a GPU host (no Docker or
# Buildkite needed): a cu job and a torch job through `kbgen local` and
# `kbgen run`, the noise record quiet and disturbed (through kbgen-nvml,
# and again through nvidia-smi to compare cost_ms), the NVML inventory
# against nvidia-smi's plan, the clean-GPU check (`kbgen node check-gpu`),
# and `kbgen node qualify`. Prints one line per step ("NAME rc=N wall=MS") and leaves every
# result.json, noise.json and log in OUTDIR for docs/testing.md.
#
#   bash scripts/gpu-checklist.sh KERNELBOT_EXAMPLES OUTDIR [KBGEN]
#
# KERNELBOT_EXAMPLES is a Kernelbot checkout's examples/ directory (its
# identity_cuda and matmul_py tasks are the cu and torch jobs; kbgen ships
# no CUDA or torch task). KBGEN is a kbgen binary (default: built here).
# Needs nvidia-smi, nvcc and a python3 with torch. About 8 minutes on an H100.
set -uo pipefail

examples=${1:?usage: gpu-checklist.sh KERNELBOT_EXAMPLES OUTDIR [KBGEN]}
out=${2:?usage: gpu-checklist.sh KERNELBOT_EXAMPLES OUTDIR [KBGEN]}
kbgen=${3:-}
mkdir -p "$out" || exit 1
if [ -z "$kbgen" ]; then
  kbgen="$out/kbgen"
  (cd "$(dirname "$0")/.." && CGO_ENABLED=0 go build -o "$kbgen" ./cmd/kbgen) || exit 1
fi
# kbgen-nvml beside kbgen, where kbgen looks (cgo: needs a C compiler).
nvml="$(dirname "$kbgen")/kbgen-nvml"
if [ ! -x "$nvml" ]; then
  (cd "$(dirname "$0")/.." && CGO_ENABLED=1 CGO_CFLAGS="-O2 -Wno-deprecated-declarations" go build -o "$nvml" ./cmd/kbgen-nvml) || exit 1
fi
cu="$examples/identity_cuda"
torch="$examples/matmul_py"

# step NAME CMD...: run CMD with stdout to NAME.json, stderr to NAME.log.
step() {
  local name=$1 start rc
  shift
  start=$(date +%s%N)
  "$@" >"$out/$name.json" 2>"$out/$name.log"
  rc=$?
  echo "$name rc=$rc wall=$((($(date +%s%N) - start) / 1000000))ms" | tee -a "$out/summary.txt"
}

# runjob NAME PAYLOAD [PREFIX...]: kbgen run in its own directory; keeps
# result.json and noise.json as NAME-result.json and NAME-noise.json.
runjob() {
  local name=$1 job=$2 dir
  shift 2
  dir="$out/$name"
  mkdir -p "$dir"
  step "$name" "$@" "$kbgen" run --payload-file "$job" --out "$dir/result.json" --no-upload --require-gpu
}

# gpuload SECONDS: another process looping bf16 matmuls on the same GPU.
gpuload() {
  python3 -c "
import time, torch
a = torch.randn(8192, 8192, device='cuda', dtype=torch.bfloat16)
end = time.time() + $1
while time.time() < end:
    a @ a
    torch.cuda.synchronize()
" &
}

{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  nvcc --version | tail -n 1
  python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.get_device_name())'
  echo "cpus $(nproc)"; uname -r
} >"$out/machine.txt" 2>&1

for mode in test leaderboard; do
  step "local-cu-$mode" "$kbgen" local --task "$cu" --submission "$cu/submission.cu" --mode "$mode" --queue nvidia-h100 --json
  step "local-torch-$mode" "$kbgen" local --task "$torch" --submission "$torch/submission.py" --mode "$mode" --queue nvidia-h100 --json
done
"$kbgen" encode --task "$cu" --submission "$cu/submission.cu" --mode leaderboard >"$out/cu.b64" || exit 1
"$kbgen" encode --task "$torch" --submission "$torch/submission.py" --mode leaderboard >"$out/torch.b64" || exit 1

# The noise record under the retry policy: quiet (exit 0, clean), a foreign
# process on the GPU (exit 75, noisy, retry), the same on the retry (exit 0,
# recorded), a busy loop on the run's CPUs (exit 75).
export KBGEN_NOISE_POLICY="max_steal_percent=5,max_foreign_percent=1,retry=true" KBGEN_RETRY_COUNT=0
runjob run-cu "$out/cu.b64"
runjob run-torch-quiet "$out/torch.b64"
# The same job with the noise record on nvidia-smi: compare the two
# noise.json's cost_ms and nvidia.source (issue 15 item 7: < 10 ms a run).
KBGEN_NVML_HELPER=off runjob run-torch-quiet-nvidia-smi "$out/torch.b64"
gpuload 70; load=$!; sleep 8
runjob run-torch-gpu-neighbour "$out/torch.b64"
KBGEN_RETRY_COUNT=1 runjob run-torch-gpu-neighbour-retry "$out/torch.b64"
kill "$load" 2>/dev/null; wait "$load" 2>/dev/null
taskset -c 2 python3 -c 'import time; end = time.time() + 60
while time.time() < end: pass' &
load=$!
runjob run-torch-cpu-hog "$out/torch.b64" taskset -c 2,3
kill "$load" 2>/dev/null; wait "$load" 2>/dev/null

# The clean-GPU check the sandbox runs before every job (docs/isolation.md),
# on the real GPU and driver, by hand (it always checks): idle (rc 0), with
# another process on the GPU (rc 75); its wall time is the check's cost per
# job. gpu-health.txt keeps the row remapper's answer and whether a
# non-root agent could read the kernel log.
uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -n 1)
step check-gpu-idle env KERNELBOT_GPU_UUID="$uuid" KBGEN_LEASE_DIR="$out/lease" "$kbgen" node check-gpu
step check-gpu-idle-again env KERNELBOT_GPU_UUID="$uuid" KBGEN_LEASE_DIR="$out/lease" "$kbgen" node check-gpu
gpuload 30; load=$!; sleep 8
step check-gpu-busy env KERNELBOT_GPU_UUID="$uuid" KBGEN_LEASE_DIR="$out/lease" "$kbgen" node check-gpu
kill "$load" 2>/dev/null; wait "$load" 2>/dev/null
{
  nvidia-smi --query-remapped-rows=gpu_uuid,remapped_rows.pending,remapped_rows.failure --format=csv,noheader,nounits
  echo "kernel.dmesg_restrict=$(cat /proc/sys/kernel/dmesg_restrict)"
  echo "Xid lines in the kernel log: $(dmesg 2>/dev/null | grep -c 'NVRM: Xid')"
} >"$out/gpu-health.txt" 2>&1

# NVML's view of the node against nvidia-smi's: the two plans must match.
step nvml-inventory "$nvml" inventory
step plan-nvml "$kbgen" node plan --queue nvidia-h100 --json
KBGEN_NVML_HELPER=off step plan-nvidia-smi "$kbgen" node plan --queue nvidia-h100 --json

step qualify "$kbgen" node qualify --no-sandbox --json
exit 0
