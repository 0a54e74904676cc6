"""The result contract between kbgen's runner and Kernelbot: every FullResult kbgen keeps as a
golden file (any tracked *.json of kbgen's checkout that is a FullResult: golden/results/,
testdata/) goes through the patched launcher's strict conversion into Kernelbot's own
dataclasses (src/libkernelbot/run_eval.py on PYTHONPATH). A field Kernelbot's dataclasses lack,
a field they require that is missing, or a timestamp Kernelbot cannot parse fails the check;
the launcher itself only logs and drops unknown fields (so a newer kbgen never fails a run),
which is why this check has to fail instead.

    PYTHONPATH=<patched Kernelbot>/src python3 scripts/kernelbot-check/contract.py KBGEN_DIR

Run by scripts/kernelbot-check.sh against a real Kernelbot, and by go test
./integrations/kernelbot (TestResultContract) against the stand-in types.
"""

import json
import subprocess
import sys
from pathlib import Path

from libkernelbot.launchers.buildkite import to_full_result
from libkernelbot.run_eval import FullResult

TOP = {"success", "error", "system", "runs"}


def golden_results(root: Path) -> list[Path]:
    """The tracked JSON files of kbgen's checkout that hold a FullResult."""
    listed = subprocess.run(
        ["git", "-C", str(root), "ls-files", "*.json"], capture_output=True, text=True, check=True
    ).stdout.split()
    found = []
    for name in listed:
        try:
            data = json.loads((root / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and TOP <= set(data):
            found.append(root / name)
    return found


def main() -> int:
    if len(sys.argv) != 2:
        print("usage: contract.py KBGEN_DIR", file=sys.stderr)
        return 2
    root = Path(sys.argv[1])
    files = golden_results(root)
    if not files:
        print(f"contract: no FullResult JSON found under {root}", file=sys.stderr)
        return 1
    failed = 0
    for path in files:
        data = json.loads(path.read_text(encoding="utf-8"))
        try:
            result = to_full_result(
                data, "https://buildkite.com/org/pipeline/builds/1", strict=True
            )
            assert isinstance(result, FullResult)
            print(f"ok    {path.relative_to(root)}: runs {sorted(result.runs)}")
        except (TypeError, ValueError, KeyError) as e:
            failed += 1
            print(f"FAIL  {path.relative_to(root)}: {e}")
    print(
        f"contract: {len(files) - failed} of {len(files)} kbgen results are Kernelbot's FullResult"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
