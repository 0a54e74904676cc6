"""Raises inside the kernel."""


def custom_kernel(data):
    raise RuntimeError("kernel launch failed: illegal memory access")
