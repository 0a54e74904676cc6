import asyncio
import base64
import datetime
import json
import threading
import zlib
from unittest.mock import patch

import pytest

from libkernelbot.consts import BUILDKITE_QUEUES, GPU_TO_SM, BuildkiteGPU, get_gpu_by_name
from libkernelbot.launchers import BuildkiteLauncher
from libkernelbot.report import RunProgressReporter
from libkernelbot.run_eval import (
    CompileResult,
    EvalResult,
    FullResult,
    ProfileResult,
    RunResult,
    SystemInfo,
)

BUILD_URL = "https://buildkite.com/gpu-mode/kernelbot/builds/7"


class MockProgressReporter(RunProgressReporter):
    """Test progress reporter that captures messages."""

    def __init__(self, title: str = "Test Buildkite Run"):
        super().__init__(title)
        self.messages = []
        self.updates = []

    async def push(self, message: str):
        self.messages.append(message)

    async def update(self, message: str):
        self.updates.append(message)


ARTIFACT_URL = (
    "https://api.buildkite.com/v2/organizations/gpu-mode/pipelines/kernelbot"
    "/builds/7/jobs/0190-eval/artifacts/0190-art/download"
)


def kbgen_result(success=True, profile=False, download_url=None) -> dict:
    """A result.json as kbgen writes it: Kernelbot's FullResult, field for field."""
    run = {
        "start": "2026-01-02T03:04:05.123456",
        "end": "2026-01-02T03:04:09.654321",
        "compilation": None,
        "run": {
            "success": True,
            "passed": True,
            "command": "python3 eval.py leaderboard",
            "stdout": "",
            "stderr": "",
            "exit_code": 0,
            "duration": 4.5,
            "result": {"benchmark-count": "1", "benchmark.0.mean": "1000.0", "check": "pass"},
        },
        "profile": None,
    }
    if profile:
        run["profile"] = {
            "profiler": "ncu",
            "trace": "UEsFBgAAAAAAAAAAAAAAAAAAAAAAAA==",
            "download_url": download_url,
        }
    return {
        "success": success,
        "error": "" if success else "the build failed",
        "system": {
            "gpu": "NVIDIA H100 80GB HBM3",
            "device_count": 1,
            "cpu": "AMD EPYC",
            "runtime": "CUDA",
            "platform": "Linux",
            "torch": "2.8.0",
            "hostname": "node-1",
        },
        "runs": {"leaderboard" if not profile else "profile.0": run},
    }


class FakeServe:
    """kbgen serve's API as the launcher calls it (POST/GET/DELETE /v1/runs, the event stream)."""

    def __init__(self, result=None, post_code=201, events=None, hang=False):
        self.calls = []
        self.result = result
        self.post_code = post_code
        self.hang = hang
        self.events = (
            events
            if events is not None
            else [
                {"event": "created", "build": 7, "url": BUILD_URL, "elapsed": 0.2},
                {"event": "state", "state": "scheduled", "elapsed": 0.5},
                {"event": "state", "state": "passed", "elapsed": 9.0},
                {"event": "done", "success": True, "exit_code": 0},
            ]
        )

    def call(self, method, path, body=None):
        self.calls.append((method, path, body))
        if method == "POST":
            return self.post_code, (
                {"error": "unknown queue"} if self.post_code >= 400 else {"state": "queued"}
            )
        if method == "DELETE":
            return 200, {"state": "done", "status": "timed_out"}
        if path.startswith("/v1/queues/"):
            return 200, {
                "queue": path.rsplit("/", 1)[1],
                "waiting": 3,
                "running": 2,
                "idle": 1,
                "busy": 2,
            }
        return 200, {
            "state": "done",
            "build": 7,
            "url": BUILD_URL,
            "build_state": "passed",
            "status": "obtained",
            "result": self.result,
        }

    def stream(self, path, put, stop: threading.Event):
        self.calls.append(("GET", path, None))
        if self.hang:
            stop.wait(10)
            return
        for e in self.events:
            put(json.dumps(e).encode() + b"\n")


def launcher_with(serve: FakeServe) -> BuildkiteLauncher:
    launcher = BuildkiteLauncher(url="http://127.0.0.1:8077", token="t")
    launcher._call = serve.call
    launcher._stream = serve.stream
    return launcher


def test_buildkite_gpus_are_known_to_kernelbot():
    for member in BuildkiteGPU:
        gpu = get_gpu_by_name(member.name)
        assert gpu.runner == "Buildkite"
        assert member.name in GPU_TO_SM
        assert BUILDKITE_QUEUES[member.value]
    for name in ["H100_BK", "B200_BK", "MI300_BK", "L40S_BK"]:
        assert get_gpu_by_name(name) is not None
    assert GPU_TO_SM["H100_BK"] == "90a"
    assert GPU_TO_SM["MI300_BK"] is None


def test_launcher_reads_server_from_env(monkeypatch):
    monkeypatch.setenv("KBGEN_SERVER", "unix:/run/kbgen/serve.sock")
    monkeypatch.setenv("KBGEN_SERVER_TOKEN", "secret")
    launcher = BuildkiteLauncher()
    assert (launcher.name, launcher.gpus) == ("Buildkite", BuildkiteGPU)
    assert (launcher.url, launcher.token) == ("unix:/run/kbgen/serve.sock", "secret")
    monkeypatch.delenv("KBGEN_SERVER")
    with pytest.raises(ValueError, match="KBGEN_SERVER"):
        BuildkiteLauncher()


@pytest.mark.asyncio
async def test_run_submission_returns_kernelbot_dataclasses():
    serve = FakeServe(result=kbgen_result())
    reporter = MockProgressReporter()
    config = {"lang": "py", "mode": "leaderboard", "main": "eval.py"}

    result = await launcher_with(serve).run_submission(config, get_gpu_by_name("H100_BK"), reporter)

    assert isinstance(result, FullResult) and result.success, result
    assert isinstance(result.system, SystemInfo) and result.system.gpu == "NVIDIA H100 80GB HBM3"
    run = result.runs["leaderboard"]
    assert isinstance(run, EvalResult) and isinstance(run.run, RunResult)
    assert run.start == datetime.datetime(2026, 1, 2, 3, 4, 5, 123456)
    assert run.end > run.start and run.run.passed
    method, path, body = serve.calls[0]
    assert (method, path, body["queue"], body["timeout_seconds"]) == (
        "POST",
        "/v1/runs",
        "nvidia-h100",
        3600.0,
    )
    assert json.loads(zlib.decompress(base64.b64decode(body["payload"]))) == config
    assert reporter.messages == ["⏳ Submitting to Buildkite queue `nvidia-h100`..."]
    assert f"[7](<{BUILD_URL}>)" in reporter.updates[0]
    assert "scheduled" in reporter.updates[1]
    assert reporter.updates[-1].startswith("✅")


@pytest.mark.asyncio
async def test_profile_points_at_its_artifact():
    serve = FakeServe(result=kbgen_result(profile=True, download_url=ARTIFACT_URL))
    result = await launcher_with(serve).run_submission(
        {"lang": "py"}, get_gpu_by_name("H100_BK"), None
    )
    profile = result.runs["profile.0"].profile
    assert isinstance(profile, ProfileResult)
    assert profile.download_url == ARTIFACT_URL


@pytest.mark.asyncio
async def test_profile_without_an_artifact_points_at_the_build():
    serve = FakeServe(result=kbgen_result(profile=True))
    result = await launcher_with(serve).run_submission(
        {"lang": "py"}, get_gpu_by_name("H100_BK"), None
    )
    profile = result.runs["profile.0"].profile
    assert isinstance(profile, ProfileResult)
    assert profile.download_url == BUILD_URL
    assert isinstance(result.runs["profile.0"].compilation, (CompileResult, type(None)))


@pytest.mark.asyncio
async def test_failed_run_is_a_result_not_an_exception():
    serve = FakeServe(result=kbgen_result(success=False))
    reporter = MockProgressReporter()
    result = await launcher_with(serve).run_submission(
        {"lang": "py"}, get_gpu_by_name("MI300_BK"), reporter
    )
    assert not result.success and result.error == "the build failed"
    assert serve.calls[0][2]["queue"] == "amd-mi300"
    assert reporter.updates[-1].startswith("❌")


@pytest.mark.asyncio
async def test_refused_run():
    serve = FakeServe(post_code=422)
    result = await launcher_with(serve).run_submission(
        {"lang": "py"}, get_gpu_by_name("H100_BK"), None
    )
    assert not result.success
    assert "refused" in result.error and "unknown queue" in result.error


@pytest.mark.asyncio
async def test_unreachable_service():
    launcher = BuildkiteLauncher(url="http://127.0.0.1:9", token="t")

    def refuse(*args, **kwargs):
        raise ConnectionRefusedError("connection refused")

    with patch.object(launcher, "_call", refuse):
        result = await launcher.run_submission(
            {"lang": "py"}, get_gpu_by_name("H100_BK"), MockProgressReporter()
        )
    assert not result.success and "unreachable" in result.error


@pytest.mark.asyncio
async def test_unreadable_result():
    bad = kbgen_result()
    bad["runs"]["leaderboard"]["run"]["surprise"] = 1
    result = await launcher_with(FakeServe(result=bad)).run_submission(
        {"lang": "py"}, get_gpu_by_name("H100_BK"), None
    )
    assert not result.success and "cannot read" in result.error


@pytest.mark.asyncio
async def test_cancelled_task_cancels_the_build():
    serve = FakeServe(hang=True, events=[])
    task = asyncio.create_task(
        launcher_with(serve).run_submission({"lang": "py"}, get_gpu_by_name("H100_BK"), None)
    )
    for _ in range(100):
        if any(path.endswith("/events?from=0") for _, path, _ in serve.calls):
            break
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert serve.calls[-1][0] == "DELETE"
    assert serve.calls[-1][1] == serve.calls[0][1] + "/" + serve.calls[0][2]["run_id"]


@pytest.mark.asyncio
async def test_queue_status():
    serve = FakeServe()
    status = await launcher_with(serve).get_queue_status(get_gpu_by_name("B200_BK"), {"lang": "cu"})
    assert (status.runner, status.gpu, status.status) == ("Buildkite", "B200_BK", "available")
    assert (status.queued_jobs, status.running_jobs, status.available_runners) == (3, 2, 1)
    assert serve.calls == [("GET", "/v1/queues/nvidia-b200", None)]


@pytest.mark.asyncio
async def test_queue_status_unavailable():
    launcher = BuildkiteLauncher(url="http://127.0.0.1:9", token="t")
    launcher._call = lambda *a: (503, {"error": "no queue view yet: Buildkite did not answer"})
    status = await launcher.get_queue_status(get_gpu_by_name("H100_BK"))
    assert (status.status, status.queued_jobs) == ("unavailable", None)
    assert "Buildkite did not answer" in status.error

    def refuse(*args):
        raise ConnectionRefusedError("connection refused")

    launcher._call = refuse
    status = await launcher.get_queue_status(get_gpu_by_name("H100_BK"))
    assert status.status == "unavailable" and "unreachable" in status.error
