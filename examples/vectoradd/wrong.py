"""Fails the check: drops the last element's addition."""


def custom_kernel(data):
    a, b = data["a"], data["b"]
    return [a[i] + b[i] for i in range(len(a) - 1)] + [a[-1]]
