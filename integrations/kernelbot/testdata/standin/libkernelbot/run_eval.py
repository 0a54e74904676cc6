# Stand-in for Kernelbot's result dataclasses (src/libkernelbot/run_eval.py
# at 4bdd839a): the same classes, field names, order and defaults.
import dataclasses
import datetime
from typing import Optional


@dataclasses.dataclass
class ProfileResult:
    profiler: str
    trace: str
    download_url: Optional[str]


@dataclasses.dataclass
class CompileResult:
    nvcc_found: bool
    nvcc_version: str
    success: bool
    command: str
    stdout: str
    stderr: str
    exit_code: int


@dataclasses.dataclass
class RunResult:
    success: bool
    passed: bool
    command: str
    stdout: str
    stderr: str
    exit_code: int
    duration: float
    result: dict


@dataclasses.dataclass
class SystemInfo:
    gpu: str = ""
    device_count: int = 1
    cpu: str = ""
    runtime: str = ""
    platform: str = ""
    torch: str = ""
    hostname: str = ""


@dataclasses.dataclass
class EvalResult:
    start: datetime.datetime
    end: datetime.datetime
    compilation: CompileResult | None
    run: RunResult | None
    profile: ProfileResult | None


@dataclasses.dataclass
class FullResult:
    success: bool
    error: str
    system: SystemInfo
    runs: dict[str, EvalResult] = dataclasses.field(default_factory=dict)
