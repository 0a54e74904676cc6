# Stand-in for Kernelbot's src/libkernelbot/launchers/launcher.py at 4bdd839a:
# the Launcher base class and RunnerQueueStatus, field for field.
from dataclasses import asdict, dataclass
from typing import Any


@dataclass
class RunnerQueueStatus:
    runner: str
    gpu: str
    queued_jobs: int | None
    running_jobs: int | None = None
    available_runners: int | None = None
    status: str = "available"
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Launcher:
    def __init__(self, name: str, gpus):
        self.name = name
        self.gpus = gpus

    async def run_submission(self, config, gpu_type, status):
        raise NotImplementedError()
