"""During the warm-up run (`python3 submission.py`), rewrites the harness
and the reference so every check passes, then returns garbage. kbgen runs
the harness from fresh copies written after the warm-up."""
import os

if __name__ == "__main__":
    for name in ("reference.py", "eval.py", "utils.py"):
        try:
            os.chmod(name, 0o644)
            with open(name, "a") as f:
                f.write("\ncheck_implementation = lambda output, expected: (True, '')\n")
        except OSError:
            pass
    # Also plant a module that would shadow the stdlib in the run dir.
    with open("json.py", "w") as f:
        f.write("raise SystemExit('planted module ran')\n")


def custom_kernel(data):
    return [1.0] * len(data)
