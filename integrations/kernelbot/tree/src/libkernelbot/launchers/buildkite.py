"""Buildkite launcher: runs submissions on vendor-donated GPUs through `kbgen serve`.

kbgen (https://github.com/gpu-mode/kbgen) turns one submission into one Buildkite
build on the GPU's queue and evaluates it with Kernelbot's own protocol; `kbgen serve`,
run beside the backend, creates the builds, watches all of them with one poller within
the organization's API budget, and survives restarts. This launcher is its client:

    KBGEN_SERVER=http://127.0.0.1:8077 KBGEN_SERVER_TOKEN=... python src/kernelbot/main.py

Standard library only (HTTP in worker threads), so it adds no dependency.
"""

import asyncio
import base64
import datetime
import http.client
import json
import os
import socket
import threading
import urllib.parse
import uuid
import zlib
from typing import Any, Callable

from libkernelbot.consts import BUILDKITE_QUEUES, GPU, BuildkiteGPU
from libkernelbot.report import RunProgressReporter
from libkernelbot.run_eval import (
    CompileResult,
    EvalResult,
    FullResult,
    ProfileResult,
    RunResult,
    SystemInfo,
)
from libkernelbot.utils import setup_logging

from .launcher import Launcher, RunnerQueueStatus

logger = setup_logging(__name__)

# The environment the launcher reads when no url/token is given.
ENV_SERVER = "KBGEN_SERVER"
ENV_SERVER_TOKEN = "KBGEN_SERVER_TOKEN"

# Seconds one HTTP request to kbgen serve may take (the event stream has none).
REQUEST_TIMEOUT = 30.0


class KbgenServeError(Exception):
    """kbgen serve could not be reached, or refused a request."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class BuildkiteLauncher(Launcher):
    """A client of one `kbgen serve` (url http://127.0.0.1:PORT, https://..., or unix:/path)."""

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        timeout_seconds: float = 3600.0,
        outage_tolerance: float = 120.0,
    ):
        super().__init__(name="Buildkite", gpus=BuildkiteGPU)
        self.url = url or os.environ.get(ENV_SERVER, "")
        self.token = token if token is not None else os.environ.get(ENV_SERVER_TOKEN, "")
        if not self.url:
            raise ValueError(f"no kbgen serve URL: pass url or set {ENV_SERVER}")
        # A run not done this long after its submission (queue wait included) is canceled by
        # kbgen serve and comes back as a failure: a queue without agents never hangs a task.
        self.timeout_seconds = timeout_seconds
        # How long the service may be unreachable (its restart) before a run gives up.
        self.outage_tolerance = outage_tolerance

    # --- the launcher ---------------------------------------------------------------

    async def run_submission(
        self, config: dict, gpu_type: GPU, status: RunProgressReporter, *, run_id: str | None = None
    ) -> FullResult:
        """Run one job on gpu_type's queue and return its FullResult; never raises for a failed
        run. run_id names the run: the same id again attaches to the same build instead of
        creating a second one (Kernelbot passes none today, so each call is a new run)."""
        queue = BUILDKITE_QUEUES.get(gpu_type.value)
        if queue is None:
            return _failed(f"{gpu_type.name} is not a Buildkite GPU")
        run_id = run_id or f"kb-{uuid.uuid4().hex[:16]}"
        request = {
            "run_id": run_id,
            "queue": queue,
            "payload": encode_config(config),
            "timeout_seconds": self.timeout_seconds,
        }
        progress = _Progress(status)
        await progress.start(queue)
        try:
            code, body = await asyncio.to_thread(self._call, "POST", "/v1/runs", request)
        except OSError as e:
            return await progress.failed(f"kbgen serve at {self.url} is unreachable: {e}")
        if code >= 400:
            return await progress.failed(
                f"kbgen serve refused the run ({code}): {body.get('error', '')}"
            )
        try:
            final = await self._follow(request, progress)
        except asyncio.CancelledError:
            # Kernelbot gave up on the submission: stop the build too, whatever happens next.
            await asyncio.shield(asyncio.to_thread(self._cancel, run_id))
            raise
        return await progress.finished(final)

    async def get_queue_status(
        self, gpu_type: GPU, config: dict | None = None
    ) -> RunnerQueueStatus:
        """The queue's backlog and agents from kbgen serve's cached view (no Buildkite request)."""
        queue = BUILDKITE_QUEUES.get(gpu_type.value)
        if queue is None:
            return _unavailable(self.name, gpu_type, f"{gpu_type.name} is not a Buildkite GPU")
        try:
            code, body = await asyncio.to_thread(
                self._call, "GET", f"/v1/queues/{urllib.parse.quote(queue)}"
            )
        except OSError as e:
            return _unavailable(self.name, gpu_type, f"kbgen serve is unreachable: {e}")
        if code != 200:
            return _unavailable(
                self.name, gpu_type, body.get("error") or f"kbgen serve answered {code}"
            )
        try:
            return RunnerQueueStatus(
                runner=self.name,
                gpu=gpu_type.name,
                queued_jobs=int(body["waiting"]),
                running_jobs=int(body["running"]),
                available_runners=int(body["idle"]),
            )
        except (KeyError, TypeError, ValueError) as e:
            return _unavailable(
                self.name, gpu_type, f"kbgen serve sent an unreadable queue status: {e!r}"
            )

    # --- following a run ------------------------------------------------------------

    async def _follow(self, request: dict, progress: "_Progress") -> dict:  # noqa: C901
        """Stream the run's events until it is done, riding out a restart of the service;
        return its final status (GET /v1/runs/{id})."""
        run_id = request["run_id"]
        seen = 0
        loop = asyncio.get_running_loop()
        down_since: float | None = None
        while True:
            lines: asyncio.Queue = asyncio.Queue()
            stop = threading.Event()
            thread = threading.Thread(
                target=self._reader, args=(run_id, seen, lines, loop, stop), daemon=True
            )
            thread.start()
            done = False
            try:
                while (line := await lines.get()) is not None:
                    seen += 1
                    down_since = None
                    event = json.loads(line)
                    if event.get("event") == "done":
                        done = True
                        break
                    await progress.event(event)
            finally:
                stop.set()
            if done:
                try:
                    code, body = await asyncio.to_thread(self._call, "GET", f"/v1/runs/{run_id}")
                except OSError as e:
                    code, body = 0, {"error": str(e)}
                if code == 200 and body.get("result") is not None:
                    return body
                # kbgen serve drops a result only past its budget, and says why.
                why = (body.get("result_gone") if code == 200 else None) or code
                return {"result": None, "error": f"run {run_id} ended without a result ({why})"}
            # The stream broke (a service restart): resume where it stopped. A restarted
            # service that never created the build gets the run again; the id makes it safe.
            now = loop.time()
            down_since = down_since or now
            if now - down_since > self.outage_tolerance:
                return {
                    "result": None,
                    "error": f"kbgen serve unreachable for {self.outage_tolerance:.0f}s; "
                    f"run {run_id} may still be running",
                }
            await asyncio.sleep(0.5)
            try:
                code, _ = await asyncio.to_thread(self._call, "GET", f"/v1/runs/{run_id}")
                if code == 404:
                    await asyncio.to_thread(self._call, "POST", "/v1/runs", request)
            except OSError:
                pass

    def _reader(
        self, run_id: str, start: int, lines: asyncio.Queue, loop, stop: threading.Event
    ) -> None:
        def put(item):
            try:
                loop.call_soon_threadsafe(lines.put_nowait, item)
            except RuntimeError:  # the loop is closed: nobody waits for this run any more
                pass

        try:
            self._stream(f"/v1/runs/{run_id}/events?from={start}", put, stop)
        except Exception as e:  # the service went away: _follow reconnects
            logger.info("kbgen serve event stream of %s broke: %s", run_id, e)
        finally:
            put(None)

    def _cancel(self, run_id: str) -> None:
        try:
            self._call("DELETE", f"/v1/runs/{run_id}")
        except OSError as e:
            logger.warning("could not cancel run %s: %s", run_id, e)

    # --- HTTP (blocking; called in worker threads) ------------------------------------

    def _connection(self, timeout: float | None) -> http.client.HTTPConnection:
        if self.url.startswith("unix:"):
            return _UnixHTTPConnection(self.url[len("unix:") :], timeout)
        u = urllib.parse.urlsplit(self.url)
        cls = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
        return cls(u.hostname, u.port, timeout=timeout)

    def _headers(self) -> dict:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def _call(self, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
        conn = self._connection(REQUEST_TIMEOUT)
        try:
            headers = self._headers()
            data = None
            if body is not None:
                data = json.dumps(body).encode()
                headers["Content-Type"] = "application/json"
            conn.request(method, path, body=data, headers=headers)
            resp = conn.getresponse()
            raw = resp.read()
            try:
                answer = json.loads(raw or b"{}")
            except ValueError:
                answer = {"error": raw[:500].decode(errors="replace")}
            return resp.status, answer if isinstance(answer, dict) else {
                "error": "not a JSON object"
            }
        finally:
            conn.close()

    def _stream(self, path: str, put: Callable[[Any], None], stop: threading.Event) -> None:
        conn = self._connection(None)
        try:
            conn.request("GET", path, headers=self._headers())
            resp = conn.getresponse()
            if resp.status != 200:
                raise KbgenServeError(f"events: HTTP {resp.status}", resp.status)
            while not stop.is_set():
                line = resp.readline()
                if not line:
                    return
                put(line)
        finally:
            conn.close()


def encode_config(config: dict) -> str:
    """The payload as Kernelbot's GitHub launcher encodes it: base64(zlib(json))."""
    return base64.b64encode(zlib.compress(json.dumps(config).encode("utf-8"))).decode("ascii")


def to_full_result(data: dict, build_url: str | None = None) -> FullResult:
    """kbgen's result.json (Kernelbot's FullResult, field for field) as Kernelbot's dataclasses.
    A profile run's download_url is the profile artifact (profile_data/<run>.zip of the eval
    job), as kbgen serve sets it from Buildkite's artifact list: the REST download URL, which
    answers a token that may read artifacts with a redirect to the file. Only a result that
    names none (an older kbgen serve, or an upload that failed) points at the build."""
    runs = {}
    for key, v in (data.get("runs") or {}).items():
        profile = None if v.get("profile") is None else ProfileResult(**v["profile"])
        if profile is not None and not profile.download_url and build_url:
            profile.download_url = build_url
        runs[key] = EvalResult(
            start=datetime.datetime.fromisoformat(v["start"]),
            end=datetime.datetime.fromisoformat(v["end"]),
            compilation=None if v.get("compilation") is None else CompileResult(**v["compilation"]),
            run=None if v.get("run") is None else RunResult(**v["run"]),
            profile=profile,
        )
    return FullResult(
        success=bool(data.get("success")),
        error=data.get("error") or "",
        system=SystemInfo(**(data.get("system") or {})),
        runs=runs,
    )


def _failed(message: str) -> FullResult:
    return FullResult(success=False, error=message, system=SystemInfo(), runs={})


def _unavailable(runner: str, gpu_type: GPU, error: str) -> RunnerQueueStatus:
    return RunnerQueueStatus(
        runner=runner, gpu=gpu_type.name, queued_jobs=None, status="unavailable", error=error
    )


class _Progress:
    """The run's line on Kernelbot's RunProgressReporter: pushed once, then updated in place
    with the build link and its state."""

    def __init__(self, status: RunProgressReporter | None):
        self.status = status
        self.build = ""
        self.url = ""
        self.state = "waiting for kbgen serve"

    async def _show(self, text: str, push: bool = False) -> None:
        if self.status is None:
            return
        if push:
            await self.status.push(text)
        else:
            await self.status.update(text)

    def _link(self) -> str:
        return f"Buildkite build [{self.build}](<{self.url}>)" if self.build else "Buildkite run"

    async def start(self, queue: str) -> None:
        self.queue = queue
        await self._show(f"⏳ Submitting to Buildkite queue `{queue}`...", push=True)

    async def event(self, e: dict) -> None:
        kind = e.get("event")
        if kind == "created":
            self.build, self.url = str(e.get("build", "")), e.get("url", "")
            self.state = "created"
        elif kind in ("state", "job", "budget"):
            self.state = str(e.get("state", ""))
        elif kind == "canceled":
            self.state = "canceled"
        else:
            return
        await self._show(f"⏳ {self._link()}: {self.state} ({float(e.get('elapsed', 0)):.1f}s)")

    async def failed(self, message: str) -> FullResult:
        await self._show(f"❌ {self._link()}: {message}")
        return _failed(message)

    async def finished(self, final: dict) -> FullResult:
        data = final.get("result")
        if data is None:
            return await self.failed(final.get("error") or "no result")
        self.url = self.url or final.get("url", "")
        self.build = self.build or str(final.get("build") or "")
        try:
            result = to_full_result(data, self.url or None)
        except (KeyError, TypeError, ValueError) as e:
            return await self.failed(f"kbgen serve returned a result Kernelbot cannot read: {e!r}")
        mark = "✅" if result.success else "❌"
        await self._show(
            f"{mark} {self._link()}: {final.get('build_state') or final.get('status', 'done')}"
        )
        return result


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float | None):
        super().__init__("kbgen-serve", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if self.timeout is not None:
            self.sock.settimeout(self.timeout)
        self.sock.connect(self._path)
