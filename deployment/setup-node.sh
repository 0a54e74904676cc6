#!/usr/bin/env bash
# setup-node.sh: turn this GPU machine into kbgen Buildkite agents, one per GPU.
#
#   sudo ./deployment/setup-node.sh --queue nvidia-h100 --token-file /root/agent-token
#
# It checks the prerequisites and names exactly what is missing, installs
# kbgen from this checkout (or a signed release: KBGEN_BINARY), installs
# buildkite-agent if it is missing, runs `kbgen node install`, and enables
# and starts one buildkite-agent-gpu@N.service per agent. Running it again
# (with the same options) changes nothing unless something changed; an
# agent the new plan lacks (a --shape or --mig-queue left out) is stopped
# and removed. See docs/vendor-onboarding.md.
#
# The agent token is read from a file or stdin only, never from the
# environment or argv (sudo VAR=... puts it on sudo's command line):
#
#   sudo ./deployment/setup-node.sh --queue nvidia-h100 --token-file - < agent-token
#
# Off a node, staged against a fixture machine (no driver, docker or root):
#
#   ROOT=/tmp/stage ./deployment/setup-node.sh --fixture node/testdata/h100x8 --queue nvidia-h100 --shape nvidia-h100x8
#
# Options (each also an environment variable, in brackets):
#   --queue Q            Buildkite queue the agents serve, e.g. nvidia-h100 [QUEUE]
#   --shape Q            a multi-GPU queue served besides it, repeatable
#                        [SHAPES, space-separated], e.g. nvidia-h100x8
#   --mig-queue Q        one agent per MIG instance on this queue [MIG_QUEUE]
#   --token-file FILE    the agent token (- reads stdin); needed the first
#                        time, then kept root-only, never printed [TOKEN_FILE]
#   --fixture DIR        plan for a fixture machine (DIR/sys and its
#                        nvml-inventory.json, nvidia-smi*.txt/csv or
#                        rocm-smi.json) instead of this one; needs ROOT [FIXTURE]
#   --allow-unknown-queue  install for a queue the vendor registry does not
#                        list yet [ALLOW_UNKNOWN_QUEUE=1]
#   --check-only         check the prerequisites, change nothing (exit 1 if any is missing)
#   --dry-run            check, then show what would be installed, change nothing [DRY_RUN=1]
#   -h, --help           this text
#
# Environment:
#   VERIFICATION_KEY       public JWKS file: agents refuse unsigned or altered steps
#   KBGEN_BINARY           a release kbgen (kbgen-vX.Y.Z-linux-ARCH) to install
#                          instead of `go build`: SHA256SUMS and SHA256SUMS.sig
#                          beside it must verify against deployment/allowed_signers
#                          (ssh-keygen -Y verify, no network); kbgen-nvml-… and
#                          kbgen-e2e-… of the same release are installed with it
#   ALLOW_UNSIGNED=1       install a KBGEN_BINARY without a verified signature
#                          (your own build), with a warning
#   KBGEN_NVML_BINARY      a prebuilt kbgen-nvml (NVIDIA nodes; default: the
#                          release's beside KBGEN_BINARY, else built with cgo when
#                          a C compiler is here; without it kbgen uses nvidia-smi)
#   RESERVE_CORES          housekeeping cores per NUMA node (kbgen default: 1)
#   RESERVE_MEMORY         memory per NUMA node kept for the host (kbgen default: 16g)
#   ROOT                   install into this staging directory instead of / (no
#                          users, packages or services are touched)
#   MANAGE_SYSTEM=1        with ROOT: still install packages, add the user and
#                          run systemctl (image builds; tests with stubs)
#   KBGEN_SYSFS, KBGEN_DEV where /sys and /dev are (tests point them at fixtures)
#   KBGEN_ALLOWED_SIGNERS  another allowed-signers file (tests, forks)
set -euo pipefail

usage() { sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; }

check_only=0
dry_run=${DRY_RUN:-0}
QUEUE=${QUEUE:-}
MIG_QUEUE=${MIG_QUEUE:-}
TOKEN_FILE=${TOKEN_FILE:-}
FIXTURE=${FIXTURE:-}
ALLOW_UNKNOWN_QUEUE=${ALLOW_UNKNOWN_QUEUE:-0}
read -r -a shapes <<<"${SHAPES:-}"
# needs_value OPT [ARG]: exit 2 unless OPT has a value.
needs_value() {
  if [ -z "${2:-}" ]; then
    echo "setup-node.sh: $1 needs a value (see --help)" >&2
    exit 2
  fi
}
while [ $# -gt 0 ]; do
  case "$1" in
    --queue) needs_value "$@"; QUEUE=$2; shift ;;
    --shape) needs_value "$@"; shapes+=("$2"); shift ;;
    --mig-queue) needs_value "$@"; MIG_QUEUE=$2; shift ;;
    --token-file) needs_value "$@"; TOKEN_FILE=$2; shift ;;
    --fixture) needs_value "$@"; FIXTURE=$2; shift ;;
    --allow-unknown-queue) ALLOW_UNKNOWN_QUEUE=1 ;;
    --check-only) check_only=1 ;;
    --dry-run) dry_run=1 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "setup-node.sh: unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

ROOT=${ROOT:-/}
SYSFS=${KBGEN_SYSFS:-/sys}
DEV=${KBGEN_DEV:-/dev}
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
staging=0
[ "$ROOT" != / ] && staging=1
manage_system=${MANAGE_SYSTEM:-$((1 - staging))}
r=${ROOT%/}
token_file="${ROOT%/}/etc/buildkite-agent/kbgen/token.env"
kbgen_dest="${ROOT%/}/usr/local/bin/kbgen"
nvml_dest="${ROOT%/}/usr/local/bin/kbgen-nvml"
e2e_dest="${ROOT%/}/usr/local/bin/kbgen-e2e"
jwks_file="${ROOT%/}/etc/buildkite-agent/kbgen/verification.jwks"
plan_file="${ROOT%/}/etc/buildkite-agent/kbgen/plan.json"
signers=${KBGEN_ALLOWED_SIGNERS:-$repo/deployment/allowed_signers}
# The agent kbgen is tested with (docs/vendor-onboarding.md), and the oldest
# it accepts.
agent_version=3.52.1
agent_min=3.50.2
# Buildkite's apt signing key, as its install guide names it
# (https://buildkite.com/docs/agent/v3/ubuntu: "curl -fsSL
# https://keys.openpgp.org/vks/v1/by-fingerprint/32A3…D198"). The key a
# keyserver returns is checked against it before apt trusts it.
buildkite_apt_fpr=32A37959C2FA5C3C99EFBC32A79206696452D198

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

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# companion NAME: the release's NAME-SUFFIX beside KBGEN_BINARY (kbgen-SUFFIX),
# else NAME beside it; "" when neither is there.
companion() {
  local dir base
  dir=$(dirname "$KBGEN_BINARY")
  base=$(basename "$KBGEN_BINARY")
  if [ "$base" != kbgen ] && [ -x "$dir/$1-${base#kbgen-}" ]; then
    printf '%s' "$dir/$1-${base#kbgen-}"
  elif [ -x "$dir/$1" ]; then
    printf '%s' "$dir/$1"
  fi
}

# verify_release FILE...: SHA256SUMS beside KBGEN_BINARY is signed by a key
# of the allowed signers and lists each FILE with its hash. Offline.
verify_release() {
  local dir sums f want have sum name
  dir=$(dirname "$KBGEN_BINARY")
  sums="$dir/SHA256SUMS"
  if [ ! -f "$sums" ] || [ ! -f "$sums.sig" ]; then
    echo "no SHA256SUMS and SHA256SUMS.sig beside it (download them with the binaries)"
    return 1
  fi
  if ! command -v ssh-keygen >/dev/null 2>&1; then
    echo "ssh-keygen is not installed (apt-get install openssh-client)"
    return 1
  fi
  if ! ssh-keygen -Y verify -f "$signers" -I kbgen-release -n kbgen-release -s "$sums.sig" <"$sums" >/dev/null 2>&1; then
    echo "SHA256SUMS.sig does not verify against $signers"
    return 1
  fi
  for f in "$@"; do
    want=""
    while read -r sum name; do
      [ "$name" = "$(basename "$f")" ] && want=$sum
    done <"$sums"
    have=$(sha256sum "$f" | cut -d' ' -f1)
    if [ -z "$want" ] || [ "$want" != "$have" ]; then
      echo "$(basename "$f") is not in the signed SHA256SUMS with its hash"
      return 1
    fi
  done
}

# ---- prerequisites -------------------------------------------------------
say "== checking prerequisites"
if [ "$manage_system" = 1 ] && [ "$(id -u)" != 0 ]; then
  need "root: run with sudo (or set ROOT=DIR to stage the files somewhere else)"
fi
if [ -z "$QUEUE" ]; then
  need "--queue: name the Buildkite queue these agents serve, e.g. --queue nvidia-h100"
else
  ok "queue $QUEUE${shapes[*]:+, shapes ${shapes[*]}}${MIG_QUEUE:+, MIG queue $MIG_QUEUE}"
fi
# The token: a file, or stdin copied into this run's private directory.
token_in=""
if [ -n "${BUILDKITE_AGENT_TOKEN:-}" ]; then
  need "BUILDKITE_AGENT_TOKEN: do not pass the token in the environment (sudo VAR=... shows it in ps); use --token-file FILE or --token-file - (stdin)"
elif [ "$TOKEN_FILE" = - ]; then
  (umask 077 && cat >"$tmp/token")
  if [ -s "$tmp/token" ]; then
    token_in=$tmp/token
    ok "agent token read from stdin"
  else
    need "--token-file -: stdin held no token"
  fi
elif [ -n "$TOKEN_FILE" ]; then
  if [ -r "$TOKEN_FILE" ] && [ -s "$TOKEN_FILE" ]; then
    token_in=$TOKEN_FILE
    ok "agent token file $TOKEN_FILE"
  else
    need "--token-file: $TOKEN_FILE is not a readable, non-empty file"
  fi
elif [ -f "$token_file" ]; then
  ok "agent token already installed ($token_file)"
elif [ -n "$FIXTURE" ]; then
  say "note:    no agent token: a rehearsal; staged agents would not start until $token_file exists"
else
  need "--token-file: the agent token of your Buildkite cluster (Agents > Agent tokens) in a file, or - to read it from stdin"
fi
if [ -n "${VERIFICATION_KEY:-}" ] && [ ! -r "$VERIFICATION_KEY" ]; then
  need "VERIFICATION_KEY: $VERIFICATION_KEY is not a readable file"
fi

# A fixture machine stands in for this one: its sysfs, and the GPU tool
# outputs kbgen node install reads instead of running the tools.
fixture_args=()
runtime=""
if [ -n "$FIXTURE" ]; then
  if [ "$staging" = 0 ] || [ "$manage_system" = 1 ]; then
    need "--fixture: plans for another machine; stage it (ROOT=DIR), never install it on this one"
  elif [ ! -d "$FIXTURE/sys" ]; then
    need "--fixture: $FIXTURE/sys is not a directory (see node/testdata)"
  else
    SYSFS=$FIXTURE/sys
    fixture_args=(--sysfs "$SYSFS")
    if [ -f "$FIXTURE/nvml-inventory.json" ]; then
      runtime=nvidia; fixture_args+=(--nvml-inventory "$FIXTURE/nvml-inventory.json")
    elif [ -f "$FIXTURE/nvidia-smi.csv" ]; then
      runtime=nvidia; fixture_args+=(--nvidia-smi "$FIXTURE/nvidia-smi.csv")
      [ -f "$FIXTURE/nvidia-smi-topo.txt" ] && fixture_args+=(--nvidia-topo "$FIXTURE/nvidia-smi-topo.txt")
      [ -f "$FIXTURE/nvidia-smi-mig.txt" ] && fixture_args+=(--nvidia-smi-list "$FIXTURE/nvidia-smi-mig.txt")
    else
      runtime=rocm
      [ -f "$FIXTURE/rocm-smi.json" ] && fixture_args+=(--rocm-smi "$FIXTURE/rocm-smi.json")
    fi
    ok "fixture machine $FIXTURE ($runtime; staged: driver, docker, toolkit and cgroup not checked)"
  fi
fi

if [ -n "$FIXTURE" ]; then
  :
elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
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

if [ -n "$FIXTURE" ]; then
  :
elif ! command -v docker >/dev/null 2>&1; then
  need "docker: install Docker Engine (https://docs.docker.com/engine/install/) and start it"
elif ! docker info >/dev/null 2>&1; then
  need "docker: installed but the engine does not answer; systemctl enable --now docker"
else
  ok "docker engine"
fi

# (A fixture machine: "fixturenvidia", nothing to check.)
case "${FIXTURE:+fixture}$runtime" in
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

if [ -n "$FIXTURE" ]; then
  :
elif [ -f "$SYSFS/fs/cgroup/cgroup.controllers" ]; then
  ok "cgroup v2"
else
  need "cgroup v2: $SYSFS/fs/cgroup is cgroup v1; add systemd.unified_cgroup_hierarchy=1 to GRUB_CMDLINE_LINUX in /etc/default/grub, run update-grub and reboot"
fi

nvml_src=""
e2e_src=""
if [ -n "${KBGEN_BINARY:-}" ]; then
  if [ -x "$KBGEN_BINARY" ]; then
    nvml_src=${KBGEN_NVML_BINARY:-$(companion kbgen-nvml)}
    e2e_src=$(companion kbgen-e2e)
    release_files=("$KBGEN_BINARY")
    [ -n "$nvml_src" ] && [ -z "${KBGEN_NVML_BINARY:-}" ] && release_files+=("$nvml_src")
    [ -n "$e2e_src" ] && release_files+=("$e2e_src")
    if why=$(verify_release "${release_files[@]}"); then
      ok "kbgen release $KBGEN_BINARY: SHA256SUMS signed by $signers"
    elif [ "${ALLOW_UNSIGNED:-0}" = 1 ]; then
      say "WARNING: kbgen binary $KBGEN_BINARY is NOT a verified release ($why); installing it because ALLOW_UNSIGNED=1"
    else
      need "KBGEN_BINARY: $KBGEN_BINARY is not a verified release: $why; install a signed release, or set ALLOW_UNSIGNED=1 for your own build"
    fi
  else
    need "KBGEN_BINARY: $KBGEN_BINARY is not an executable file"
  fi
elif command -v go >/dev/null 2>&1; then
  ok "go toolchain to build kbgen ($(go env GOVERSION 2>/dev/null || echo unknown))"
else
  need "kbgen: install Go $(sed -n 's/^go //p' "$repo/go.mod") or newer (https://go.dev/dl/), or set KBGEN_BINARY to a signed release of kbgen"
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
# kbgen-e2e, from the same release: `kbgen doctor --e2e` runs it from
# beside kbgen, so the node needs no Go to check itself end to end.
if [ -n "$e2e_src" ]; then
  install_binary "$e2e_src" "$e2e_dest"
fi

# kbgen-nvml reads NVML for the noise record and node discovery (package
# nvmlhelper): one sample in well under a millisecond instead of two
# nvidia-smi starts. Dynamically linked (cgo), so built apart from kbgen;
# optional, since kbgen falls back to nvidia-smi without it. A release
# names it kbgen-nvml-vX.Y.Z-linux-ARCH; it is installed as kbgen-nvml.
if [ "$runtime" = nvidia ]; then
  if [ -z "$nvml_src" ] && [ -z "${KBGEN_BINARY:-}" ] && [ -z "$FIXTURE" ] && command -v cc >/dev/null 2>&1; then
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
      keyring="$r/usr/share/keyrings/buildkite-agent-archive-keyring.gpg"
      curl -fsSL "https://keys.openpgp.org/vks/v1/by-fingerprint/$buildkite_apt_fpr" |
        gpg --dearmor --yes -o "$keyring"
      # apt trusts whatever key is in the keyring: it must be Buildkite's.
      got=$(gpg --show-keys --with-colons "$keyring" 2>/dev/null | sed -n 's/^fpr:\{9\}\([0-9A-F]*\):.*/\1/p' | head -n 1)
      if [ "$got" != "$buildkite_apt_fpr" ]; then
        rm -f "$keyring"
        say "error: the key fetched for Buildkite's apt repository has fingerprint ${got:-none}, not $buildkite_apt_fpr (https://buildkite.com/docs/agent/v3/ubuntu); nothing was installed from it" >&2
        exit 1
      fi
      say "ok:      Buildkite apt key $got"
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
[ "${#fixture_args[@]}" -gt 0 ] && args+=("${fixture_args[@]}")
for shape in "${shapes[@]}"; do
  args+=(--shape "$shape")
done
[ -n "$MIG_QUEUE" ] && args+=(--mig-queue "$MIG_QUEUE")
[ "$ALLOW_UNKNOWN_QUEUE" = 1 ] && args+=(--allow-unknown-queue)
# The token reaches kbgen as a file name, never as a value: ps shows argv
# and /proc shows the environment of the process.
[ -n "$token_in" ] && args+=(--token-file "$token_in")
[ -n "${VERIFICATION_KEY:-}" ] && args+=(--verification-key "$VERIFICATION_KEY")
[ -n "${RESERVE_CORES:-}" ] && args+=(--reserve-cores "$RESERVE_CORES")
[ -n "${RESERVE_MEMORY:-}" ] && args+=(--reserve-memory "$RESERVE_MEMORY")
[ "$dry_run" = 1 ] && args+=(--dry-run)
kbgen=$kbgen_dest
[ -x "$kbgen" ] || kbgen=$tmp/kbgen
"$kbgen" "${args[@]}" | tee "$tmp/install.log"

# Agents the plan no longer has (a GPU gone, a --shape or --mig-queue left
# out): kbgen node install lists them as stale with their unit.
stale=()
while read -r id; do
  stale+=("$id")
done < <(sed -n 's|^stale  *.*/kbgen/\(gpu[0-9a-z-]*\): .*|\1|p' "$tmp/install.log")

if [ "$manage_system" = 0 ] || [ "$dry_run" = 1 ]; then
  # A staging tree has no units to stop: its stale agents just go. Else
  # (a dry run, or a real root without MANAGE_SYSTEM) nothing is touched.
  for id in "${stale[@]}"; do
    if [ "$staging" = 1 ] && [ "$dry_run" = 0 ]; then
      rm -rf "$r/etc/buildkite-agent/kbgen/$id"
      say "removed      /etc/buildkite-agent/kbgen/$id"
    else
      say "would remove /etc/buildkite-agent/kbgen/$id (stale; its unit disabled first)"
    fi
  done
  say "== staged under $ROOT; nothing started"
  exit 0
fi

say "== starting the agents"
changed=0
grep -qE '^(created|updated) ' "$tmp/install.log" && changed=1
systemctl daemon-reload
# Stop each stale agent, then drop its files.
for id in "${stale[@]}"; do
  systemctl disable --now "buildkite-agent-gpu@${id#gpu}.service" || true
  rm -rf "$r/etc/buildkite-agent/kbgen/$id"
  say "removed      /etc/buildkite-agent/kbgen/$id"
done
# Every agent of the plan: one GPU (gpu3), a shape (gpux8-0), a MIG slice
# (gpu3-mig0); the unit's instance is the id without "gpu".
units=()
while read -r id; do
  units+=("buildkite-agent-gpu@${id#gpu}.service")
done < <(sed -n 's/.*"id": "\(gpu[0-9a-z-]*\)".*/\1/p' "$plan_file")
systemctl enable --now "${units[@]}"
if [ "$changed" = 1 ]; then
  # An agent finishes its running job before it restarts.
  systemctl try-restart --no-block "${units[@]}"
fi
say "== ${#units[@]} agents enabled for queue $QUEUE; verify with: sudo kbgen doctor"
