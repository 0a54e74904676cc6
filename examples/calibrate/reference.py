"""The calibration walk of `kbgen node qualify` (qualify/calibrate.go's
kernel): xorshift64 steps over a 4096-word buffer, each step adding into
one word and reading another, so the work is the core's and its L1's."""

MASK64 = (1 << 64) - 1
WORDS = 4096


def walk(iters, seed):
    buf = [0] * WORDS
    x = 88172645463325252 ^ (seed & MASK64) or 1
    s = 0
    mask = WORDS - 1
    for _ in range(iters):
        x ^= (x << 13) & MASK64
        x ^= x >> 7
        x ^= (x << 17) & MASK64
        j = x & mask
        buf[j] = (buf[j] + x) & MASK64
        s = (s + buf[(j * 7) & mask]) & MASK64
    return s


def generate_input(size, seed):
    return {"iters": size, "seed": seed}


def ref_kernel(data):
    return walk(data["iters"], data["seed"])


def check_implementation(output, expected):
    if output != expected:
        return False, f"checksum {output!r}, want {expected!r}"
    return True, ""
