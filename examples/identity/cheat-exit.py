"""Forges `check: pass` and ends the process with exit code 0 before the
harness can compare anything (Kernelbot's fd cheat)."""
import os


def custom_kernel(data):
    for n in range(3, 32):
        try:
            os.write(n, b"check: pass\n")
        except OSError:
            pass
    os._exit(0)
