#!/usr/bin/env python3
"""Reads `go test -json` on stdin and prints what a person needs: the output
of every failed test, the reason of every skipped one (a test that could not
run here says why, e.g. no Docker engine), go's usual ok/FAIL line per
package, and a closing `packages: N passed, N failed` line. Exits 1 if any
package failed. For a fuzzing run (`go test -json -fuzz`, as scripts/fuzz.sh
runs it) it also prints each target's executions and rate, so a target that
stalls (a slow input, a long minimization) shows as a low number."""
import collections
import json
import re
import sys

FUZZ_PROGRESS = re.compile(r"fuzz: elapsed: (\d+)s, execs: (\d+) \((\d+)/sec\)(?:, new interesting: (\d+))?")

output = collections.defaultdict(list)  # (package, test) -> lines
passed, failed = [], []
fuzz = {}  # (package, target) -> the last progress line's numbers
for raw in sys.stdin:
    try:
        ev = json.loads(raw)
    except ValueError:
        print(raw, end="")  # build errors come as plain text
        continue
    key = (ev.get("Package", ""), ev.get("Test"))
    action = ev.get("Action")
    if action == "output":
        line = ev.get("Output", "")
        m = FUZZ_PROGRESS.search(line)
        if m:
            fuzz[key] = m.groups()
        output[key].append(line)
    elif action == "fail" and ev.get("Test"):
        sys.stdout.write("".join(output.pop(key, [])))
    elif action == "skip" and ev.get("Test"):
        lines = [l for l in output.pop(key, []) if not l.startswith("=== ")]
        sys.stdout.write("".join(lines))
    elif action in ("pass", "fail", "skip") and not ev.get("Test"):
        pkg_out = output.pop(key, [])
        if action == "fail":
            failed.append(key[0])
            sys.stdout.write("".join(l for l in pkg_out if not l.startswith(("=== ", "--- PASS", "PASS"))))
        else:
            last = [l for l in pkg_out if l.startswith(("ok", "?"))]
            sys.stdout.write("".join(last) or f"ok  \t{key[0]}\n")
            passed.append(key[0])
    elif action == "pass" and ev.get("Test"):
        output.pop(key, None)

for (pkg, target), (elapsed, execs, _, new) in sorted(fuzz.items()):
    rate = int(execs) // max(1, int(elapsed))
    print(f"fuzz: {target} ({pkg}): {execs} executions in {elapsed}s ({rate}/s), new interesting: {new or 0}")
print(f"packages: {len(passed)} passed, {len(failed)} failed")
sys.exit(1 if failed else 0)
