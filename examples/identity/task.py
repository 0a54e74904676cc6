"""Types of the identity task."""
from typing import List

input_t = List[float]
output_t = List[float]
