"""Types of the vectoradd task (Kernelbot tasks ship one for submitters)."""
from typing import Dict, List

input_t = Dict[str, List[float]]
output_t = List[float]
