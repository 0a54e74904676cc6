# Stand-in for Kernelbot's src/libkernelbot/consts.py at 4bdd839a: the GPU
# dataclass, the runner enums, the lookup that refuses a GPU name two
# runners share, SubmissionMode and the GitHub launcher's default timeout. kernelbot_test.go appends the patch's generated block
# (BuildkiteGPU, BUILDKITE_QUEUES) and GPU_TO_SM.
import dataclasses
from enum import Enum


class GitHubGPU(Enum):
    NVIDIA = "NVIDIA"
    MI300 = "MI300"


class ModalGPU(Enum):
    H100 = "H100"
    B200 = "B200"
    L4x4 = "L4x4"


@dataclasses.dataclass
class GPU:
    name: str
    value: str
    runner: str


def _make_gpu_lookup(runner_map):
    lookup = {}
    for runner, gpus in runner_map.items():
        for name, member in gpus.__members__.items():
            if name.lower() in lookup:
                raise ValueError(f"Duplicate gpu name '{name}' found across Enums.")
            lookup[name.lower()] = GPU(name=name, value=member.value, runner=runner)
    return lookup


def get_gpu_by_name(name: str) -> GPU:
    return _GPU_LOOKUP.get(name.lower(), None)


class SubmissionMode(Enum):
    TEST = "test"
    BENCHMARK = "benchmark"
    PROFILE = "profile"
    LEADERBOARD = "leaderboard"
    PRIVATE = "private"


DEFAULT_GITHUB_TIMEOUT_MINUTES = 10  # Default timeout for GitHub launcher in minutes
