"""The Buildkite launcher against a stand-in kbgen serve over real HTTP (aiohttp.web on
127.0.0.1 or a unix socket): the same requests, answers and event stream as kbgen serve's API
(docs/backend.md in kbgen), scripted per test."""

import asyncio
import base64
import datetime
import json
import logging
import os
import tempfile
import zlib

import pytest
from aiohttp import web

from libkernelbot.background_submission_manager import HARD_TIMEOUT_SEC
from libkernelbot.consts import BUILDKITE_QUEUES, GPU_TO_SM, BuildkiteGPU, get_gpu_by_name
from libkernelbot.launchers import BuildkiteLauncher, buildkite
from libkernelbot.report import RunProgressReporter
from libkernelbot.run_eval import EvalResult, FullResult, ProfileResult, RunResult, SystemInfo
from libkernelbot.utils import KernelBotError

BUILD_URL = "https://buildkite.com/gpu-mode/kernelbot/builds/7"
TOKEN = "serve-token-not-for-logs"
H100 = get_gpu_by_name("H100_BK")
CONFIG = {"lang": "py", "mode": "test", "main": "eval.py", "test_timeout": 180}


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


def kbgen_result(success=True, profile=False) -> dict:
    """A result.json as kbgen writes it: Kernelbot's FullResult, field for field."""
    run = {
        "start": "2026-01-02T03:04:05.123456",
        "end": "2026-01-02T03:04:09.654321",
        "compilation": None,
        "run": {
            "success": True,
            "passed": True,
            "command": "python3 eval.py test",
            "stdout": "",
            "stderr": "",
            "exit_code": 0,
            "duration": 4.5,
            "result": {"check": "pass"},
        },
        "profile": None,
    }
    if profile:
        run["profile"] = {
            "profiler": "ncu",
            "trace": "UEsFBgAAAAAAAAAAAAAAAAAAAAAAAA==",
            "download_url": "https://api.buildkite.com/v2/organizations/gpu-mode/pipelines/"
            "kernelbot/builds/7/jobs/0190/artifacts/0191/download",
        }
    return {
        "success": success,
        "error": "" if success else "build 7 failed: the eval job exited 1",
        "system": {
            "gpu": "NVIDIA H100 80GB HBM3",
            "device_count": 1,
            "cpu": "AMD EPYC",
            "runtime": "CUDA",
            "platform": "Linux",
            "torch": "2.8.0",
            "hostname": "node-1",
        },
        "runs": {"profile.0" if profile else "test": run},
    }


def line(event: dict) -> bytes:
    return json.dumps(event).encode() + b"\n"


CREATED = line({"event": "created", "build": 7, "url": BUILD_URL, "elapsed": 0.2})
RUNNING = line({"event": "state", "state": "running", "elapsed": 1.5})
DONE = line({"event": "done", "success": True, "exit_code": 0})
HEARTBEAT = line({"event": "heartbeat"})


class FakeServe:
    """kbgen serve's API over real HTTP. Each event stream request takes the next script of
    `streams`: bytes are written as they are, a number sleeps that long, "hang" stays silent
    until the client goes away, a function is called; at the end of a script the connection
    closes. GET /v1/runs/{id} answers "building" until a stream has sent the done event."""

    def __init__(self, result=None, streams=None, post_status=201, post_delay=0.0):
        self.result = kbgen_result() if result is None else result
        self.final = None  # the answer of GET /v1/runs/{id}; default: done with result
        self.streams = list(streams if streams is not None else [[CREATED, RUNNING, DONE]])
        self.post_status = post_status
        self.post_delay = post_delay
        self.queue_answer = (200, {"queue": "nvidia-b200", "waiting": 3, "running": 2, "idle": 1})
        self.known = True
        self.done = False
        self.requests = []  # (method, path with query, JSON body, Authorization header)
        self.posted = asyncio.Event()
        self.deleted = asyncio.Event()
        self.url = ""
        self._runner = None
        self._dir = None
        self._handlers = set()  # the requests being answered

    async def __aenter__(self):
        app = web.Application(middlewares=[self._track])
        app.router.add_post("/v1/runs", self.post)
        app.router.add_get("/v1/runs/{id}", self.get)
        app.router.add_get("/v1/runs/{id}/events", self.events)
        app.router.add_delete("/v1/runs/{id}", self.delete)
        app.router.add_get("/v1/queues/{queue}", self.queue)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self._dir = tempfile.TemporaryDirectory()
        self.socket = os.path.join(self._dir.name, "serve.sock")
        await web.UnixSite(self._runner, self.socket).start()
        return self

    async def __aexit__(self, *exc):
        # A handler still waiting for a client that went away (a cancel, a deadline) is
        # ended here, not left pending when the test's event loop closes.
        for task in self._handlers:
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        await self._runner.cleanup()
        self._dir.cleanup()

    @web.middleware
    async def _track(self, request, handler):
        task = asyncio.current_task()
        self._handlers.add(task)
        try:
            return await handler(request)
        finally:
            self._handlers.discard(task)

    async def _record(self, request, body=None):
        self.requests.append(
            (request.method, request.path_qs, body, request.headers.get("Authorization"))
        )

    def paths(self, method):
        return [path for m, path, _, _ in self.requests if m == method]

    async def post(self, request):
        body = await request.json()
        await self._record(request, body)
        self.posted.set()
        await until_gone(request, self.post_delay)
        if self.post_status >= 400:
            return web.json_response({"error": "unknown queue"}, status=self.post_status)
        self.known = True
        return web.json_response(
            {"run_id": body["run_id"], "state": "queued"}, status=self.post_status
        )

    async def get(self, request):
        await self._record(request)
        if not self.known:
            return web.json_response({"error": "no run"}, status=404)
        if not self.done:
            return web.json_response({"run_id": request.match_info["id"], "state": "building"})
        final = self.final or {
            "run_id": request.match_info["id"],
            "state": "done",
            "build": 7,
            "url": BUILD_URL,
            "build_state": "passed",
            "status": "obtained" if self.result.get("success") else "runner_failed",
            "result": self.result,
        }
        return web.json_response(final)

    async def events(self, request):
        await self._record(request)
        if not self.known:
            return web.json_response({"error": "no run"}, status=404)
        script = self.streams.pop(0) if self.streams else [DONE]
        resp = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await resp.prepare(request)
        for step in script:
            if step == "hang":
                await until_gone(request, 3600)
            elif isinstance(step, (int, float)):
                await asyncio.sleep(step)
            elif callable(step):
                step()
            else:
                self.done = self.done or step == DONE
                await resp.write(step)
        return resp

    async def delete(self, request):
        await self._record(request)
        self.deleted.set()
        return web.json_response({"state": "done", "status": "timed_out"})

    async def queue(self, request):
        await self._record(request)
        status, body = self.queue_answer
        if isinstance(body, bytes):
            return web.Response(body=body, status=status)
        return web.json_response(body, status=status)


async def until_gone(request, seconds):
    """Sleep up to seconds, ending early when the client has gone away."""
    for _ in range(int(seconds / 0.05)):
        if request.transport is None or request.transport.is_closing():
            return
        await asyncio.sleep(0.05)


def launcher_for(serve: FakeServe, **kwargs) -> BuildkiteLauncher:
    return BuildkiteLauncher(url=serve.url, token=TOKEN, **kwargs)


def test_buildkite_gpus_are_known_to_kernelbot():
    for member in BuildkiteGPU:
        gpu = get_gpu_by_name(member.name)
        assert gpu.runner == "Buildkite"
        assert member.name in GPU_TO_SM
        assert BUILDKITE_QUEUES[member.value]
    for name in ["H100_BK", "B200_BK", "MI300_BK", "L40S_BK", "H100_Nebius_BK", "MI300x8_BK"]:
        assert get_gpu_by_name(name) is not None, name
    assert GPU_TO_SM["H100_BK"] == "90a"
    assert GPU_TO_SM["MI300_BK"] is None
    assert BUILDKITE_QUEUES["H100_Nebius_BK"] == "nebius-h100"
    assert len(set(BUILDKITE_QUEUES.values())) == len(BuildkiteGPU)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"url": "127.0.0.1:8077", "token": "t"}, "must start with http://, https:// or unix:"),
        ({"url": "ftp://host", "token": "t"}, "must start with"),
        ({"url": "http://", "token": "t"}, "names no host"),
        ({"url": "http://127.0.0.1:8077"}, "KBGEN_SERVER_TOKEN is not set"),
        ({"url": "https://kbgen.example.org", "token": "  "}, "KBGEN_SERVER_TOKEN is not set"),
        ({"url": "unix:"}, "names no socket path"),
        ({"url": "unix:/s", "queue_timeout": "ten"}, "KBGEN_QUEUE_TIMEOUT='ten' is not a number"),
        ({"url": "unix:/s", "queue_timeout": -1}, "must be a positive number"),
        ({"url": "unix:/s", "queue_timeout": 1700}, "leaves no time to run"),
    ],
)
def test_bad_settings_fail_at_construction(kwargs, message):
    with pytest.raises(ValueError, match=message):
        BuildkiteLauncher(**kwargs)


def test_settings():
    launcher = BuildkiteLauncher(url="unix:/run/kbgen/serve.sock", queue_timeout="300")
    assert (launcher.name, launcher.gpus) == ("Buildkite", BuildkiteGPU)
    assert (launcher.url, launcher.token, launcher.queue_timeout) == (
        "unix:/run/kbgen/serve.sock",
        "",
        300,
    )
    assert (
        BuildkiteLauncher(url="", queue_timeout="").queue_timeout == buildkite.DEFAULT_QUEUE_TIMEOUT
    )


@pytest.mark.asyncio
async def test_without_kbgen_serve_a_buildkite_gpu_fails_saying_so():
    launcher = BuildkiteLauncher(url=None, token=None)
    with pytest.raises(KernelBotError, match="KBGEN_SERVER is not set"):
        await launcher.run_submission(CONFIG, H100, MockProgressReporter())
    status = await launcher.get_queue_status(H100)
    assert (status.status, status.queued_jobs) == ("unavailable", None)
    assert "KBGEN_SERVER is not set" in status.error


def test_budget_follows_the_task():
    launcher = BuildkiteLauncher(url="unix:/s", queue_timeout=300)
    slack = buildkite.STARTUP_SLACK
    assert slack <= 120
    cases = {
        "test": 60,  # test_timeout
        "benchmark": 90,  # benchmark_timeout
        "leaderboard": 240,  # ranked_timeout
        "profile": 600,  # no timeout of its own: the GitHub launcher's default
        "private": 600,
    }
    timeouts = {"test_timeout": 60, "benchmark_timeout": 90, "ranked_timeout": 240}
    for mode, seconds in cases.items():
        assert launcher.budget({"mode": mode, **timeouts}) == seconds + slack + 300, mode
    # Never past the API path's hard timeout: the launcher's deadline fires first.
    assert buildkite.API_HARD_TIMEOUT == HARD_TIMEOUT_SEC
    huge = launcher.budget({"mode": "test", "test_timeout": 3 * 3600})
    assert huge == buildkite.MAX_BUDGET < HARD_TIMEOUT_SEC


@pytest.mark.asyncio
async def test_run_submission_returns_kernelbot_dataclasses(caplog):
    caplog.set_level(logging.INFO)
    stream = [
        CREATED,
        b"\n",
        HEARTBEAT,
        b"not json\n",
        b"[1]\n",
        RUNNING,
        line({"event": "new-kind"}),
        line({"event": "job", "state": "scheduled", "elapsed": 1.6}),
        line({"event": "budget", "state": "waiting for API budget", "elapsed": 1.7}),
        DONE,
    ]
    async with FakeServe(streams=[stream]) as serve:
        reporter = MockProgressReporter()
        result = await launcher_for(serve).run_submission(CONFIG, H100, reporter)

    assert isinstance(result, FullResult) and result.success, result
    assert isinstance(result.system, SystemInfo) and result.system.gpu == "NVIDIA H100 80GB HBM3"
    run = result.runs["test"]
    assert isinstance(run, EvalResult) and isinstance(run.run, RunResult)
    assert run.start == datetime.datetime(2026, 1, 2, 3, 4, 5, 123456)
    method, path, body, auth = serve.requests[0]
    assert (method, path, body["queue"], auth) == (
        "POST",
        "/v1/runs",
        "nvidia-h100",
        f"Bearer {TOKEN}",
    )
    assert (
        body["timeout_seconds"] == 180 + buildkite.STARTUP_SLACK + buildkite.DEFAULT_QUEUE_TIMEOUT
    )
    assert json.loads(zlib.decompress(base64.b64decode(body["payload"]))) == CONFIG
    assert serve.paths("DELETE") == []
    assert reporter.messages == ["⏳ Submitting to Buildkite queue `nvidia-h100`..."]
    assert f"[7](<{BUILD_URL}>)" in reporter.updates[0]
    link = f"Buildkite build [7](<{BUILD_URL}>)"
    # The build's state stays in view when its eval job's and the budget's follow.
    assert reporter.updates[1:4] == [
        f"⏳ {link}: running (1.5s)",
        f"⏳ {link}: running, eval job scheduled (1.6s)",
        f"⏳ {link}: running, eval job scheduled, waiting for API budget (1.7s)",
    ]
    assert reporter.updates[-1].startswith("✅")
    logs = caplog.text
    assert body["run_id"] in logs and BUILD_URL in logs and "running" in logs
    assert TOKEN not in logs


@pytest.mark.asyncio
async def test_unix_socket():
    async with FakeServe() as serve:
        launcher = BuildkiteLauncher(url=f"unix:{serve.socket}")
        result = await launcher.run_submission(CONFIG, get_gpu_by_name("MI300_BK"), None)
    assert result.success
    assert serve.requests[0][2]["queue"] == "amd-mi300"
    assert serve.requests[0][3] is None  # no token on a socket


@pytest.mark.asyncio
async def test_profile_link_is_the_build_page():
    async with FakeServe(result=kbgen_result(profile=True)) as serve:
        result = await launcher_for(serve).run_submission(CONFIG, H100, None)
    profile = result.runs["profile.0"].profile
    assert isinstance(profile, ProfileResult)
    assert profile.download_url == BUILD_URL
    assert profile.trace


@pytest.mark.asyncio
async def test_a_run_that_did_not_run_raises(caplog):
    async with FakeServe(result=kbgen_result(success=False)) as serve:
        reporter = MockProgressReporter()
        with pytest.raises(buildkite.KbgenError) as err:
            await launcher_for(serve).run_submission(CONFIG, H100, reporter)
    run_id = serve.requests[0][2]["run_id"]
    assert err.value.run_id == run_id
    assert run_id in str(err.value) and "the eval job exited 1" in str(err.value)
    assert BUILD_URL in str(err.value) and "runner_failed" in str(err.value)
    assert reporter.updates[-1].startswith("❌")
    assert run_id in caplog.text


@pytest.mark.asyncio
async def test_a_dropped_result_raises():
    async with FakeServe() as serve:
        serve.done, serve.final = True, {
            "state": "done",
            "build": 7,
            "url": BUILD_URL,
            "status": "obtained",
            "result_gone": "the result was dropped: over the budget",
        }
        with pytest.raises(buildkite.KbgenError, match="without a result: the result was dropped"):
            await launcher_for(serve).run_submission(CONFIG, H100, None)


@pytest.mark.asyncio
@pytest.mark.parametrize("status", [401, 409, 422])
async def test_refused_run(status):
    async with FakeServe(post_status=status) as serve:
        with pytest.raises(
            buildkite.KbgenError, match=rf"refused the run \({status}\) unknown queue"
        ):
            await launcher_for(serve).run_submission(CONFIG, H100, None)
        assert serve.paths("GET") == []


@pytest.mark.asyncio
async def test_serve_down():
    async with FakeServe() as serve:
        url = serve.url
    launcher = BuildkiteLauncher(url=url, token=TOKEN, outage_tolerance=0.5)
    with pytest.raises(buildkite.KbgenError, match="kbgen serve unreachable for 0.5s"):
        await asyncio.wait_for(launcher.run_submission(CONFIG, H100, MockProgressReporter()), 10)
    status = await launcher.get_queue_status(H100)
    assert status.status == "unavailable" and "ClientConnectorError" in status.error


@pytest.mark.asyncio
async def test_reconnects_are_not_an_outage():
    # Every stream breaks after one event and 0.3 s, longer than the outage tolerance all
    # together: each reconnect answers, so the run never counts as unreachable.
    passed = line({"event": "job", "state": "passed"})
    streams = [[CREATED, 0.3], [RUNNING, 0.3], [HEARTBEAT, 0.3], [passed, 0.3], [DONE]]
    async with FakeServe(streams=streams) as serve:
        result = await launcher_for(serve, outage_tolerance=0.25).run_submission(CONFIG, H100, None)
    assert result.success
    froms = [p.rsplit("=", 1)[1] for p in serve.paths("GET") if "/events" in p]
    assert froms == ["0", "1", "2", "2", "3"]


@pytest.mark.asyncio
async def test_silent_stream_reconnects():
    async with FakeServe(streams=[[CREATED, "hang"], [DONE]]) as serve:
        launcher = launcher_for(serve, stream_read_timeout=0.3)
        result = await asyncio.wait_for(launcher.run_submission(CONFIG, H100, None), 10)
    assert result.success
    assert [p for p in serve.paths("GET") if "/events" in p][-1].endswith("from=1")


@pytest.mark.asyncio
async def test_deadline_cancels_the_build(monkeypatch):
    monkeypatch.setattr(buildkite, "STARTUP_SLACK", 0)
    async with FakeServe(streams=[[CREATED] + [HEARTBEAT, 0.1] * 100]) as serve:
        launcher = launcher_for(serve, queue_timeout=0.5)
        reporter = MockProgressReporter()
        with pytest.raises(buildkite.KbgenError, match="not done within its budget of 1s"):
            await asyncio.wait_for(
                launcher.run_submission({**CONFIG, "test_timeout": 0.5}, H100, reporter), 10
            )
    run_id = serve.requests[0][2]["run_id"]
    assert serve.paths("DELETE") == [f"/v1/runs/{run_id}"]
    assert serve.requests[0][2]["timeout_seconds"] == 1.0
    assert reporter.updates[-1].startswith("❌ Buildkite build [7]")


@pytest.mark.asyncio
async def test_cancel_during_create_deletes_the_run():
    async with FakeServe(post_delay=30) as serve:
        task = asyncio.create_task(launcher_for(serve).run_submission(CONFIG, H100, None))
        await asyncio.wait_for(serve.posted.wait(), 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.wait_for(serve.deleted.wait(), 10)
    run_id = serve.requests[0][2]["run_id"]
    assert serve.paths("DELETE") == [f"/v1/runs/{run_id}"]


@pytest.mark.asyncio
async def test_cancel_while_running_deletes_the_run():
    async with FakeServe(streams=[[CREATED, "hang"]]) as serve:
        reporter = MockProgressReporter()
        task = asyncio.create_task(launcher_for(serve).run_submission(CONFIG, H100, reporter))
        for _ in range(200):
            if reporter.updates:
                break
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert serve.paths("DELETE") == [f"/v1/runs/{serve.requests[0][2]['run_id']}"]


@pytest.mark.asyncio
async def test_a_run_unknown_after_a_restart_is_submitted_again():
    serve = FakeServe()

    def forget():  # the restarted service lost the run before it created the build
        serve.known = False

    serve.streams = [[CREATED, RUNNING, forget], [DONE]]
    async with serve:
        result = await asyncio.wait_for(launcher_for(serve).run_submission(CONFIG, H100, None), 10)
    assert result.success
    posts = [body for method, _, body, _ in serve.requests if method == "POST"]
    assert len(posts) == 2 and posts[0] == posts[1]


@pytest.mark.asyncio
async def test_unknown_fields_are_ignored(caplog):
    caplog.set_level(logging.INFO)
    newer = kbgen_result()
    newer["system"]["numa"] = [0, 1]
    newer["runs"]["test"]["run"]["surprise"] = 1
    async with FakeServe(result=newer) as serve:
        result = await launcher_for(serve).run_submission(CONFIG, H100, None)
    assert result.success and result.system.gpu == "NVIDIA H100 80GB HBM3"
    assert "['numa']" in caplog.text and "['surprise']" in caplog.text
    with pytest.raises(
        buildkite.UnknownFields, match=r"runs\['test'\].run has fields RunResult lacks: surprise"
    ):
        buildkite.to_full_result(newer, strict=True)
    del newer["runs"]["test"]["run"]["surprise"]
    with pytest.raises(buildkite.UnknownFields, match="system has fields SystemInfo lacks: numa"):
        buildkite.to_full_result(newer, strict=True)
    assert buildkite.to_full_result(kbgen_result(), strict=True).success


def test_parse_event():
    assert buildkite.parse_event(b'{"event": "state", "state": "running"}\n')["state"] == "running"
    for skipped in [
        b"\n",
        b"",
        b"\r\n",
        b"{",
        b"null\n",
        b"[]\n",
        b'{"event": 1}\n',
        HEARTBEAT,
        b'{"x": 1}\n',
    ]:
        assert buildkite.parse_event(skipped) is None, skipped


@pytest.mark.asyncio
async def test_queue_status():
    async with FakeServe() as serve:
        status = await launcher_for(serve).get_queue_status(
            get_gpu_by_name("B200_BK"), {"lang": "cu"}
        )
    assert (status.runner, status.gpu, status.status) == ("Buildkite", "B200_BK", "available")
    assert (status.queued_jobs, status.running_jobs, status.available_runners) == (3, 2, 1)
    assert serve.paths("GET") == ["/v1/queues/nvidia-b200"]


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "answer, error",
    [
        (
            (503, {"error": "no queue view yet: Buildkite did not answer"}),
            "Buildkite did not answer",
        ),
        ((401, {"error": "missing or wrong bearer token"}), "wrong bearer token"),
        ((200, b"<html>proxy</html>"), "KeyError"),
        ((200, {"waiting": "many", "running": 0, "idle": 0}), "ValueError"),
    ],
)
async def test_queue_status_unavailable(answer, error):
    async with FakeServe() as serve:
        serve.queue_answer = answer
        status = await launcher_for(serve).get_queue_status(H100)
    assert (status.status, status.queued_jobs) == ("unavailable", None)
    assert error in status.error
