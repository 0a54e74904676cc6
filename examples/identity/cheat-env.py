"""Looks for secrets in its environment and reports them on stderr (where
they would end up in result.json)."""
import os
import sys

leaked = sorted(k for k in os.environ if "TOKEN" in k or k.startswith(("BUILDKITE", "KERNELBOT")))
print("leaked:" + ",".join(leaked), file=sys.stderr)


def custom_kernel(data):
    return list(data)
