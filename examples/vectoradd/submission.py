"""A correct vectoradd submission."""
from task import input_t, output_t


def custom_kernel(data: input_t) -> output_t:
    a, b = data["a"], data["b"]
    return [a[i] + b[i] for i in range(len(a))]


if __name__ == "__main__":
    print("warm-up: nothing to compile")
