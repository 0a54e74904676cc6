#!/usr/bin/env bash
# kernelbot-check.sh [--no-e2e] KERNELBOT_DIR: proves kernelbot.patch against a
# real Kernelbot checkout (gpu-mode/kernelbot). On a scratch copy of the
# checkout it
#   1. applies integrations/kernelbot/kernelbot.patch with git apply;
#   2. runs Kernelbot's own tests that need no database (test_backend,
#      test_modal, test_github, test_report, test_task, test_utils,
#      test_kernelguard, and the patch's test_buildkite; the tests that need
#      Kernelbot's PostgreSQL are skipped, saying so);
#   3. checks the patch's edits to Kernelbot's own files
#      (scripts/kernelbot-check/test_patched_kernelbot.py) and the result contract: every FullResult kbgen keeps as a golden
#      file goes through Kernelbot's own dataclasses with no field they lack
#      (scripts/kernelbot-check/contract.py);
#   4. unless --no-e2e (then it says that this part did not run), runs a
#      submission through Kernelbot's KernelBackend.handle_submission
#      against a real `kbgen serve` whose builds run the real `kbgen run` on
#      real buildkite-agents and the local Buildkite (internal/e2e's
#      TestKernelbotBackend: leaderboard mode scored by compute_score, a
#      failing submission, a cancelled task, get_runner_queue_status).
#
# Environment:
#   KERNELBOT_PYTHON      a Python >= 3.12 that imports Kernelbot's
#                         dependencies plus pytest and pytest-asyncio
#                         (default python3)
#   KERNELBOT_PYTHONPATH  prepended to PYTHONPATH after the checkout's src/
#                         (stand-ins for packages your index lacks)
# Needs git; step 4 also docker, go and buildkite-agent, as scripts/e2e.sh does.
#
# Example:
#   git clone https://github.com/gpu-mode/kernelbot ~/kernelbot
#   KERNELBOT_PYTHON=~/kernelbot/.venv/bin/python bash scripts/kernelbot-check.sh ~/kernelbot
set -euo pipefail

e2e=1
if [ "${1:-}" = "--no-e2e" ]; then
  e2e=0
  shift
fi
if [ $# -ne 1 ] || [ ! -d "$1/src/libkernelbot" ]; then
  echo "usage: scripts/kernelbot-check.sh [--no-e2e] KERNELBOT_DIR (a gpu-mode/kernelbot checkout)" >&2
  exit 2
fi
here="$(cd "$(dirname "$0")/.." && pwd)"
src="$(cd "$1" && pwd)"
py="${KERNELBOT_PYTHON:-python3}"
work="$(mktemp -d /tmp/kernelbot-check.XXXXXX)"
trap 'rm -rf "$work"' EXIT

echo "--- Kernelbot $(git -C "$src" log -1 --format='%h %s (%cs)') from $src"
if ! "$py" -c 'import sys; sys.exit(sys.version_info < (3, 12))'; then
  echo "kernelbot-check: $py is $("$py" -V 2>&1); Kernelbot needs Python >= 3.12 (set KERNELBOT_PYTHON)" >&2
  exit 2
fi
"$py" -V

echo "--- applying integrations/kernelbot/kernelbot.patch to a copy"
git clone --quiet --no-hardlinks "$src" "$work/kernelbot"
git -C "$work/kernelbot" checkout --quiet "$(git -C "$src" rev-parse HEAD)"
git -C "$work/kernelbot" apply --verbose "$here/integrations/kernelbot/kernelbot.patch"

export PYTHONPATH="$work/kernelbot/src${KERNELBOT_PYTHONPATH:+:$KERNELBOT_PYTHONPATH}:$here/scripts/kernelbot-check"
export PYTHONDONTWRITEBYTECODE=1

echo "--- Kernelbot's tests (no database)"
(cd "$work/kernelbot" && "$py" -m pytest -p nodb -p no:cacheprovider -W ignore::DeprecationWarning -m "not integration" -rs \
  tests/test_backend.py tests/test_modal.py tests/test_github.py tests/test_report.py tests/test_task.py \
  tests/test_utils.py tests/test_kernelguard.py tests/test_buildkite.py)

echo "--- the patch's edits to Kernelbot's files (env.py, main.py, admin_cog.py, report.py)"
(cd "$work/kernelbot" && "$py" -m pytest -q -p no:cacheprovider -W ignore::DeprecationWarning \
  "$here/scripts/kernelbot-check/test_patched_kernelbot.py")

echo "--- the result contract: kbgen's golden results through Kernelbot's dataclasses"
"$py" "$here/scripts/kernelbot-check/contract.py" "$here"

if [ "$e2e" -eq 0 ]; then
  echo "kernelbot-check: --no-e2e: no submission went through kbgen serve and real builds" >&2
  exit 0
fi
echo "--- a submission through KernelBackend.handle_submission, kbgen serve and real builds"
cd "$here"
rc=0
KBGEN_KERNELBOT_DIR="$work/kernelbot" KBGEN_KERNELBOT_PYTHON="$py" KBGEN_KERNELBOT_PYTHONPATH="${KERNELBOT_PYTHONPATH:-}" \
  go test -count=1 -v -run '^TestKernelbotBackend$' ./internal/e2e/ >"$work/e2e.log" 2>&1 || rc=$?
# The agents' logs are long: print the steps and the verdict; all of it on failure.
if [ "$rc" -ne 0 ]; then
  cat "$work/e2e.log"
else
  grep -E '^(--- |ok|PASS$)|(PASS|FAIL|SKIP)  |passed, |skip' "$work/e2e.log"
fi
if grep -q -- '--- SKIP' "$work/e2e.log"; then
  echo "kernelbot-check: the end-to-end part was skipped (see above)" >&2
  exit 1
fi
exit "$rc"
