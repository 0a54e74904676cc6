"""Identity: return the input unchanged (Kernelbot's identity example)."""
from utils import make_rng, match_lists


def generate_input(size, seed):
    rng = make_rng(seed)
    return [rng.uniform(-1, 1) for _ in range(size)]


def ref_kernel(data):
    return list(data)


def check_implementation(output, expected):
    return match_lists(output, expected, rtol=0, atol=0)
