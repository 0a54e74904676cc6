"""A wrong calibrate submission: its checksum is off by one."""
from reference import walk
from task import input_t, output_t


def custom_kernel(data: input_t) -> output_t:
    return walk(data["iters"], data["seed"]) + 1
