"""Types of the calibrate task."""
from typing import Dict

input_t = Dict[str, int]
output_t = int
