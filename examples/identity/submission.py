"""A correct identity submission."""


def custom_kernel(data):
    return list(data)
