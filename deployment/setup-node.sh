#!/usr/bin/env bash
# setup-node.sh: turn this GPU machine into kbgen Buildkite agents, one per GPU.
#
#   sudo BUILDKITE_AGENT_TOKEN=... QUEUE=nvidia-h100 ./deployment/setup-node.sh
#
# It checks the prerequisites and names exactly what is missing, installs
# kbgen from this checkout (or KBGEN_BINARY), installs buildkite-agent if it
# is missing, runs `kbgen node install`, and enables and starts one
# buildkite-agent-gpu@N.service per GPU. Running it again changes nothing
# unless something changed. See docs/vendor-onboarding.md.
#
# Options:
#   --check-only   check the prerequisites, change nothing (exit 1 if any is missing)
#   --dry-run      check, then show what would be installed, change nothing
#   -h, --help     this text
#
# Environment:
#   QUEUE                  Buildkite queue the agents serve (required), e.g. nvidia-h100
#   BUILDKITE_AGENT_TOKEN  agent token (required the first time; kept root-only, never printed)
#   VERIFICATION_KEY       public JWKS file: agents refuse unsigned or altered steps
#   KBGEN_BINARY           a prebuilt static kbgen to install instead of `go build`
#   KBGEN_NVML_BINARY      a prebuilt kbgen-nvml (NVIDIA nodes; default: the one
#                          beside KBGEN_BINARY, else built with cgo when a C
#                          compiler is here; without it kbgen uses nvidia-smi)
#   RESERVE_CORES          housekeeping cores per NUMA node (kbgen default: 1)
#   RESERVE_MEMORY         memory per NUMA node kept for the host (kbgen default: 16g)
#   ROOT                   install into this staging directory instead of / (no
#                          users, packages or services are touched)
#   MANAGE_SYSTEM=1        with ROOT: still install packages, add the user and
#                          run systemctl (image builds; tests with stubs)
#   DRY_RUN=1              same as --dry-run
#   KBGEN_SYSFS, KBGEN_DEV where /sys and /dev are (tests point them at fixtures)
set -euo pipefail

usage() { sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; }

check_only=0
dry_run=${DRY_RUN:-0}
for arg in "$@"; do
  case "$arg" in
    --check-only) check_only=1 ;;
    --dry-run) dry_run=1 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "setup-node.sh: unknown argument: $arg (see --help)" >&2; exit 2 ;;
  esac
done

ROOT=${ROOT:-/}
SYSFS=${KBGEN_SYSFS:-/sys}
DEV=${KBGEN_DEV:-/dev}
QUEUE=${QUEUE:-}
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
staging=0
[ "$ROOT" != / ] && staging=1
manage_system=${MANAGE_SYSTEM:-$((1 - staging))}
r=${ROOT%/}
token_file="${ROOT%/}/etc/buildkite-agent/kbgen/token.env"
kbgen_dest="${ROOT%/}/usr/local/bin/kbgen"
nvml_dest="${ROOT%/}/usr/local/bin/kbgen-nvml"
jwks_file="${ROOT%/}/etc/buildkite-agent/kbgen/verification.jwks"
plan_file="${ROOT%/}/etc/buildkite-agent/kbgen/plan.json"
# The agent kbgen is tested with (docs/vendor-onboarding.md), and the oldest
# it accepts.
agent_version=3.52.1
agent_min=3.50.2

say() { printf '%s\n' "$*"; }
# version_at_least A B: A (X.Y.Z) is B or newer.
version_at_least() {
  local i a b
  IFS=. read -r -a a <<<"$1"
  IFS=. read -r -a b <<<"$2"
  for i in 0 1 2; do
    ((10#${a[i]:-0} > 10#${b[i]:-0})) && return 0
    ((10#${a[i]:-0} < 10#${b[i]:-0})) && return 1
  done
  return 0
}
missing=()
ok() { say "ok:      $*"; }
need() { missing+=("$1"); say "missing: $1"; }

# ---- prerequisites -------------------------------------------------------
say "== checking prerequisites"
if [ "$manage_system" = 1 ] && [ "$(id -u)" != 0 ]; then
  need "root: run with sudo (or set ROOT=DIR to stage the files somewhere else)"
fi
if [ -z "$QUEUE" ]; then
  need "QUEUE: set the Buildkite queue these agents serve, e.g. QUEUE=nvidia-h100"
else
  ok "queue $QUEUE"
fi
if [ -n "${BUILDKITE_AGENT_TOKEN:-}" ]; then
  ok "agent token given"
elif [ -f "$token_file" ]; then
  ok "agent token already installed ($token_file)"
else
  need "BUILDKITE_AGENT_TOKEN: set it to the agent token of your Buildkite cluster (Agents > Agent tokens)"
fi
if [ -n "${VERIFICATION_KEY:-}" ] && [ ! -r "$VERIFICATION_KEY" ]; then
  need "VERIFICATION_KEY: $VERIFICATION_KEY is not a readable file"
fi

runtime=""
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  runtime=nvidia
  ok "NVIDIA driver: $(nvidia-smi -L | wc -l) GPUs"
elif [ -e "$DEV/kfd" ]; then
  runtime=rocm
  ok "ROCm driver: $DEV/kfd"
elif command -v nvidia-smi >/dev/null 2>&1; then
  need "GPU driver: nvidia-smi is installed but fails ($(nvidia-smi -L 2>&1 | head -n 1)); reinstall or reload the NVIDIA driver"
else
  need "GPU driver: no nvidia-smi and no $DEV/kfd; install the NVIDIA driver (nvidia-driver-570 or newer) or ROCm (amdgpu-install --usecase=rocm)"
fi

if ! command -v docker >/dev/null 2>&1; then
  need "docker: install Docker Engine (https://docs.docker.com/engine/install/) and start it"
elif ! docker info >/dev/null 2>&1; then
  need "docker: installed but the engine does not answer; systemctl enable --now docker"
else
  ok "docker engine"
fi

case "$runtime" in
  nvidia)
    if command -v nvidia-ctk >/dev/null 2>&1 || command -v nvidia-container-cli >/dev/null 2>&1; then
      ok "NVIDIA container toolkit"
    else
      need "NVIDIA container toolkit: apt-get install nvidia-container-toolkit && nvidia-ctk runtime configure --runtime=docker && systemctl restart docker"
    fi
    ;;
  rocm)
    renders=("$DEV"/dri/renderD*)
    if [ -e "${renders[0]}" ]; then
      ok "ROCm devices: $DEV/kfd and ${#renders[@]} render nodes"
    else
      need "ROCm devices: no $DEV/dri/renderD*; is the amdgpu driver loaded (modprobe amdgpu)?"
    fi
    ;;
esac

if [ -f "$SYSFS/fs/cgroup/cgroup.controllers" ]; then
  ok "cgroup v2"
else
  need "cgroup v2: $SYSFS/fs/cgroup is cgroup v1; add systemd.unified_cgroup_hierarchy=1 to GRUB_CMDLINE_LINUX in /etc/default/grub, run update-grub and reboot"
fi

if [ -n "${KBGEN_BINARY:-}" ]; then
  if [ -x "$KBGEN_BINARY" ]; then
    ok "kbgen binary $KBGEN_BINARY"
  else
    need "KBGEN_BINARY: $KBGEN_BINARY is not an executable file"
  fi
elif command -v go >/dev/null 2>&1; then
  ok "go toolchain to build kbgen ($(go env GOVERSION 2>/dev/null || echo unknown))"
else
  need "kbgen: install Go $(sed -n 's/^go //p' "$repo/go.mod") or newer (https://go.dev/dl/), or set KBGEN_BINARY to a static kbgen built with CGO_ENABLED=0"
fi

agent_bin=$(command -v buildkite-agent 2>/dev/null || true)
if [ -n "$agent_bin" ]; then
  agent_has=$("$agent_bin" --version 2>&1 | sed -n 's/.*version \([0-9][0-9]*\.[0-9][0-9]*\.[0-9][0-9]*\).*/\1/p' | head -n 1)
  if [ -z "$agent_has" ] || ! version_at_least "$agent_has" "$agent_min"; then
    # v3.50.0 and v3.50.1 multiply job_status_interval by a second twice:
    # a running job never sees a cancel or its timeout (fixed in v3.50.2).
    need "buildkite-agent: version ${agent_has:-unknown} is older than $agent_min (a running job would never see a cancel or its timeout); install $agent_version: apt-get install buildkite-agent=$agent_version*"
  elif { [ -n "${VERIFICATION_KEY:-}" ] || [ -f "$jwks_file" ]; } && ! "$agent_bin" start --help 2>&1 | grep -q -- '--job-verification-jwks-path'; then
    # An agent without it ignores the key and runs unsigned steps.
    need "buildkite-agent: $agent_has cannot verify signed pipelines (no --job-verification-jwks-path); install $agent_version: apt-get install buildkite-agent=$agent_version*"
  elif [ "$agent_has" != "$agent_version" ]; then
    ok "buildkite-agent $agent_bin $agent_has (kbgen is tested with $agent_version; signed steps need one agent version on the control agents and the nodes)"
  else
    ok "buildkite-agent $agent_bin $agent_has"
  fi
elif [ "$manage_system" = 0 ]; then
  agent_bin=/usr/bin/buildkite-agent
  ok "buildkite-agent: not installed (staging: not installing it)"
elif command -v apt-get >/dev/null 2>&1; then
  agent_bin=/usr/bin/buildkite-agent
  say "note:    buildkite-agent is not installed; $agent_version will be installed from Buildkite's apt repository"
else
  need "buildkite-agent: install it (https://buildkite.com/docs/agent/v3/installation); this script only knows apt"
fi

if [ "${#missing[@]}" -gt 0 ]; then
  say "== ${#missing[@]} prerequisites missing; fix them and run this again"
  exit 1
fi
say "== all prerequisites present"
[ "$check_only" = 1 ] && exit 0

# ---- install --------------------------------------------------------------
run() {
  if [ "$dry_run" = 1 ]; then say "would run: $*"; else "$@"; fi
}

say "== installing kbgen"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ -n "${KBGEN_BINARY:-}" ]; then
  cp "$KBGEN_BINARY" "$tmp/kbgen"
else
  version=$(git -C "$repo" describe --tags --always --dirty 2>/dev/null || echo dev)
  # Static: the sandbox mounts this binary into runner images of any libc.
  (cd "$repo" && CGO_ENABLED=0 go build -trimpath -ldflags "-X github.com/gpu-mode/kbgen/internal/version.Version=$version" -o "$tmp/kbgen" ./cmd/kbgen)
fi
# install_binary SRC DEST: DEST becomes SRC (mode 0755) unless it is already.
install_binary() {
  if cmp -s "$1" "$2"; then
    say "unchanged    $2"
  elif [ "$dry_run" = 1 ]; then
    say "would install $2"
  else
    install -D -m 0755 "$1" "$2"
    say "installed    $2"
  fi
}
install_binary "$tmp/kbgen" "$kbgen_dest"

# kbgen-nvml reads NVML for the noise record and node discovery (package
# nvmlhelper): one sample in well under a millisecond instead of two
# nvidia-smi starts. Dynamically linked (cgo), so built apart from kbgen;
# optional, since kbgen falls back to nvidia-smi without it.
if [ "$runtime" = nvidia ]; then
  nvml_src=""
  if [ -n "${KBGEN_NVML_BINARY:-}" ]; then
    nvml_src=$KBGEN_NVML_BINARY
  elif [ -n "${KBGEN_BINARY:-}" ] && [ -x "$(dirname "$KBGEN_BINARY")/kbgen-nvml" ]; then
    nvml_src="$(dirname "$KBGEN_BINARY")/kbgen-nvml"
  elif [ -z "${KBGEN_BINARY:-}" ] && command -v cc >/dev/null 2>&1; then
    (cd "$repo" && CGO_ENABLED=1 CGO_CFLAGS="-O2 -Wno-deprecated-declarations" go build -trimpath -o "$tmp/kbgen-nvml" ./cmd/kbgen-nvml)
    nvml_src="$tmp/kbgen-nvml"
  fi
  if [ -z "$nvml_src" ]; then
    say "skipped      $nvml_dest (set KBGEN_NVML_BINARY, or build from a checkout with a C compiler): the noise record reads the GPU with nvidia-smi"
  else
    install_binary "$nvml_src" "$nvml_dest"
  fi
fi

if [ "$manage_system" = 1 ]; then
  if ! command -v buildkite-agent >/dev/null 2>&1; then
    say "== installing buildkite-agent (apt.buildkite.com)"
    run apt-get update
    run apt-get install -y apt-transport-https gpg curl
    if [ "$dry_run" = 0 ]; then
      mkdir -p "$r/usr/share/keyrings" "$r/etc/apt/sources.list.d"
      curl -fsSL https://keys.openpgp.org/vks/v1/by-fingerprint/32A37959C2FA5C3C99EFBC32A79206696452D198 |
        gpg --dearmor --yes -o "$r/usr/share/keyrings/buildkite-agent-archive-keyring.gpg"
      echo "deb [signed-by=/usr/share/keyrings/buildkite-agent-archive-keyring.gpg] https://apt.buildkite.com/buildkite-agent stable main" \
        >"$r/etc/apt/sources.list.d/buildkite-agent.list"
    fi
    run apt-get update
    # The version kbgen is tested with, on every node and control agent:
    # the agent verifies the step signatures its own version writes.
    run apt-get install -y "buildkite-agent=$agent_version*"
  fi
  # The package's own single agent would run jobs outside any placement.
  if systemctl is-enabled buildkite-agent.service >/dev/null 2>&1; then
    run systemctl disable --now buildkite-agent.service
  fi
  if ! id -u buildkite-agent >/dev/null 2>&1; then
    run useradd --system --create-home --home-dir /var/lib/buildkite-agent --shell /usr/sbin/nologin buildkite-agent
  fi
  if ! id -nG buildkite-agent 2>/dev/null | tr ' ' '\n' | grep -qx docker; then
    run usermod -aG docker buildkite-agent
  fi
fi

say "== installing the agents (kbgen node install)"
# --plugin pins this checkout's gpu-docker plugin on the host: builds at any
# other commit cannot bring their own host-side hook code.
args=(node install --queue "$QUEUE" --root "$ROOT" --sysfs "$SYSFS" --agent-binary "$agent_bin" --plugin "$repo/.buildkite/plugins/gpu-docker")
[ -n "${VERIFICATION_KEY:-}" ] && args+=(--verification-key "$VERIFICATION_KEY")
[ -n "${RESERVE_CORES:-}" ] && args+=(--reserve-cores "$RESERVE_CORES")
[ -n "${RESERVE_MEMORY:-}" ] && args+=(--reserve-memory "$RESERVE_MEMORY")
[ "$dry_run" = 1 ] && args+=(--dry-run)
kbgen=$kbgen_dest
[ -x "$kbgen" ] || kbgen=$tmp/kbgen
# The token reaches kbgen through its environment (BUILDKITE_AGENT_TOKEN),
# never through argv, where ps would show it.
"$kbgen" "${args[@]}" | tee "$tmp/install.log"

if [ "$manage_system" = 0 ] || [ "$dry_run" = 1 ]; then
  say "== staged under $ROOT; nothing started"
  exit 0
fi

say "== starting the agents"
changed=0
grep -qE '^(created|updated) ' "$tmp/install.log" && changed=1
systemctl daemon-reload
# Agents of GPUs the plan no longer has: stop them, then drop their files.
while read -r id; do
  systemctl disable --now "buildkite-agent-gpu@${id#gpu}.service" || true
  rm -rf "$r/etc/buildkite-agent/kbgen/$id"
  say "removed      /etc/buildkite-agent/kbgen/$id"
done < <(sed -n 's|^stale .*/kbgen/\(gpu[0-9]*\):.*|\1|p' "$tmp/install.log")
units=()
while read -r id; do
  units+=("buildkite-agent-gpu@${id#gpu}.service")
done < <(grep -o '"id": "gpu[0-9]*"' "$plan_file" | grep -o 'gpu[0-9]*')
systemctl enable --now "${units[@]}"
if [ "$changed" = 1 ]; then
  # An agent finishes its running job before it restarts.
  systemctl try-restart --no-block "${units[@]}"
fi
say "== ${#units[@]} agents enabled for queue $QUEUE; verify with: sudo kbgen doctor"
