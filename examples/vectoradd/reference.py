"""Vector addition: out[i] = a[i] + b[i]."""
from utils import make_rng, match_lists


def generate_input(size, seed):
    rng = make_rng(seed)
    return {"a": [rng.uniform(-1, 1) for _ in range(size)],
            "b": [rng.uniform(-1, 1) for _ in range(size)]}


def ref_kernel(data):
    return [x + y for x, y in zip(data["a"], data["b"])]


def check_implementation(output, expected):
    return match_lists(output, expected)
