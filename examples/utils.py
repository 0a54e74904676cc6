"""Helpers shared by the example tasks."""
import random


def make_rng(seed):
    return random.Random(seed)


def close(a, b, rtol=1e-5, atol=1e-8):
    return abs(a - b) <= atol + rtol * abs(b)


def match_lists(got, want, rtol=1e-5, atol=1e-8):
    """(ok, message) comparing two lists of floats."""
    if not isinstance(got, list):
        return False, f"expected a list, got {type(got).__name__}"
    if len(got) != len(want):
        return False, f"size mismatch: got {len(got)}, want {len(want)}"
    bad = 0
    first = None
    for i, (g, w) in enumerate(zip(got, want)):
        if not isinstance(g, (int, float)) or not close(g, w, rtol, atol):
            bad += 1
            if first is None:
                first = (i, g, w)
    if bad:
        i, g, w = first
        return False, f"{bad} mismatched elements; first at {i}: got {g!r}, want {w!r}"
    return True, ""
