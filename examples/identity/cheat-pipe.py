"""Writes `check: pass` to every descriptor and /proc path that could be
the verdict pipe, then returns garbage. Against Kernelbot's in-process
harnesses this wins; here the verdict pipe is not reachable."""
import os


def _forge():
    line = b"check: pass\n"
    candidates = [os.environ.get("POPCORN_FD", "")] + [str(n) for n in range(3, 32)]
    for fd in candidates:
        if fd.isdigit():
            try:
                os.write(int(fd), line)
            except OSError:
                pass
    for pid in (os.getppid(), os.getpid()):
        for n in range(3, 32):
            try:
                with open(f"/proc/{pid}/fd/{n}", "wb", buffering=0) as f:
                    f.write(line)
            except OSError:
                pass


_forge()


def custom_kernel(data):
    _forge()
    return [0.0] * len(data)
