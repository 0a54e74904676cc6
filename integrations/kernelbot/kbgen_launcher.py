"""Kernelbot launcher over `kbgen serve` (Python 3.10+, standard library only).

    from kbgen_launcher import KbgenLauncher

    launcher = KbgenLauncher()   # KBGEN_SERVER, KBGEN_SERVER_TOKEN from the environment
    result = await launcher.run_submission(config, "H100", status)

`run_submission` returns a dict shaped like Kernelbot's FullResult
(success, error, system, runs). It never raises for a failed run: a failure
is success False with the reason in error, as kbgen submit prints it. Progress
goes to `status` (Kernelbot's RunProgressReporter: `push` for a new line,
`update` for the last one). Cancelling the task cancels the build.

The service does the Buildkite work: one watcher for every run, an API
budget, webhooks, restarts. See docs/backend.md.
"""

from __future__ import annotations

import asyncio
import base64
import http.client
import json
import os
import socket
import threading
import urllib.parse
import uuid
import zlib
from typing import Any, Callable

__all__ = ["KbgenLauncher", "run_submission", "encode_config", "KbgenError"]


class KbgenError(Exception):
    """The service refused the call (bad token, bad job)."""


def encode_config(config: dict) -> str:
    """Kernelbot's payload encoding: base64(zlib(json))."""
    return base64.b64encode(zlib.compress(json.dumps(config).encode("utf-8"))).decode("ascii")


def _failed(msg: str) -> dict:
    return {"success": False, "error": msg, "system": {}, "runs": {}}


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float | None):
        super().__init__("kbgen-serve", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if self.timeout is not None:
            self.sock.settimeout(self.timeout)
        self.sock.connect(self._path)


class KbgenLauncher:
    """A client of one kbgen serve. url: http://127.0.0.1:PORT or unix:/path."""

    def __init__(self, url: str | None = None, token: str | None = None, *,
                 timeout_seconds: float = 20 * 60, outage_tolerance: float = 120.0,
                 queues: dict[str, str] | None = None):
        self.url = url or os.environ.get("KBGEN_SERVER", "")
        self.token = token if token is not None else os.environ.get("KBGEN_SERVER_TOKEN", "")
        if not self.url:
            raise ValueError("no kbgen serve URL: pass url or set KBGEN_SERVER")
        self.timeout_seconds = timeout_seconds
        self.outage_tolerance = outage_tolerance
        self.queues = queues

    # --- HTTP (blocking, run in threads) ---------------------------------

    def _connection(self, timeout: float | None) -> http.client.HTTPConnection:
        if self.url.startswith("unix:"):
            return _UnixHTTPConnection(self.url[len("unix:"):], timeout)
        u = urllib.parse.urlsplit(self.url)
        cls = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
        return cls(u.hostname, u.port, timeout=timeout)

    def _call(self, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
        conn = self._connection(60)
        try:
            headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
            data = None
            if body is not None:
                data = json.dumps(body).encode()
                headers["Content-Type"] = "application/json"
            conn.request(method, path, body=data, headers=headers)
            resp = conn.getresponse()
            raw = resp.read()
            try:
                return resp.status, json.loads(raw or b"{}")
            except ValueError:
                return resp.status, {"error": raw.decode(errors="replace")}
        finally:
            conn.close()

    def _stream(self, path: str, on_line: Callable[[bytes], None], stop: threading.Event) -> None:
        conn = self._connection(None)
        try:
            headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
            conn.request("GET", path, headers=headers)
            resp = conn.getresponse()
            if resp.status != 200:
                raise KbgenError(f"events: HTTP {resp.status}")
            while not stop.is_set():
                line = resp.readline()
                if not line:
                    return
                on_line(line)
        finally:
            conn.close()

    # --- the launcher -----------------------------------------------------

    async def run_submission(self, config: dict, gpu_type: Any, status: Any = None, *,
                             run_id: str | None = None) -> dict:
        """Run one Kernelbot job on the queue of gpu_type; return its FullResult dict."""
        queue = _queue_of(gpu_type, self.queues)
        run_id = run_id or f"kb-{uuid.uuid4().hex[:12]}"
        request = {"run_id": run_id, "queue": queue, "payload": encode_config(config),
                   "timeout_seconds": self.timeout_seconds}
        code, body = await asyncio.to_thread(self._call, "POST", "/v1/runs", request)
        if code == 401:
            raise KbgenError(body.get("error", "unauthorized: check KBGEN_SERVER_TOKEN"))
        if code >= 400:
            return _failed(f"kbgen serve refused run {run_id} ({code}): {body.get('error', '')}")
        try:
            return await self._follow(request, status)
        except asyncio.CancelledError:
            # Kernelbot gave up on the submission: stop the build too.
            await asyncio.shield(asyncio.to_thread(self._call, "DELETE", f"/v1/runs/{run_id}"))
            raise

    async def _follow(self, request: dict, status: Any) -> dict:
        run_id = request["run_id"]
        seen = 0
        loop = asyncio.get_running_loop()
        down_since: float | None = None
        reporter = _Reporter(status)
        while True:
            queue: asyncio.Queue[bytes | None] = asyncio.Queue()
            stop = threading.Event()

            def on_line(line: bytes) -> None:
                loop.call_soon_threadsafe(queue.put_nowait, line)

            def reader() -> None:
                try:
                    self._stream(f"/v1/runs/{run_id}/events?from={seen}", on_line, stop)
                except Exception:  # the service went away: reconnect below
                    pass
                finally:
                    loop.call_soon_threadsafe(queue.put_nowait, None)

            thread = threading.Thread(target=reader, daemon=True)
            thread.start()
            done = False
            try:
                while (line := await queue.get()) is not None:
                    seen += 1
                    down_since = None
                    event = json.loads(line)
                    if event.get("event") == "done":
                        done = True
                        break
                    await reporter.event(event)
            finally:
                stop.set()
            if done:
                code, body = await asyncio.to_thread(self._call, "GET", f"/v1/runs/{run_id}")
                if code == 200 and body.get("result") is not None:
                    return body["result"]
                return _failed(f"kbgen serve: run {run_id} ended without a result ({code})")
            # The stream broke (a service restart): resume, re-submitting
            # when the restarted service never created the build.
            now = loop.time()
            down_since = down_since or now
            if now - down_since > self.outage_tolerance:
                return _failed(f"kbgen serve unreachable for {self.outage_tolerance:.0f}s; run {run_id} may still be running")
            await asyncio.sleep(0.5)
            try:
                code, _ = await asyncio.to_thread(self._call, "GET", f"/v1/runs/{run_id}")
                if code == 404:
                    await asyncio.to_thread(self._call, "POST", "/v1/runs", request)
            except OSError:
                pass


class _Reporter:
    """Progress lines on Kernelbot's RunProgressReporter (push/update), if any."""

    def __init__(self, status: Any):
        self.status = status
        self.pushed = False

    async def event(self, e: dict) -> None:
        if self.status is None:
            return
        kind = e.get("event")
        if kind == "created":
            text = f"Buildkite build {e.get('build')}: {e.get('url', '')}"
        elif kind in ("state", "job", "budget"):
            text = f"{e.get('state')} ({e.get('elapsed', 0):.1f}s)"
        elif kind == "canceled":
            text = f"build {e.get('build')} canceled"
        else:
            return
        # The build link stays on its own line; the state line below it is
        # updated in place.
        if kind == "created" or not self.pushed:
            await _maybe_await(getattr(self.status, "push")(text))
            self.pushed = kind != "created"
        else:
            await _maybe_await(getattr(self.status, "update")(text))


async def _maybe_await(x: Any) -> None:
    if asyncio.iscoroutine(x):
        await x


# Kernelbot's GPU names → kbgen's queues (kbgen vendors). A name not here is
# sent lower-cased: a queue or alias the service resolves, or refuses.
DEFAULT_QUEUES = {
    "H100": "nvidia-h100", "B200": "nvidia-b200", "A100": "nvidia-a100", "L4": "nvidia-l4",
    "T4": "nvidia-t4", "L40S": "nvidia-l40s", "MI300": "amd-mi300", "MI300X": "amd-mi300",
    "MI250": "amd-mi250", "MI355X": "amd-mi355x",
}


def _queue_of(gpu_type: Any, queues: dict[str, str] | None = None) -> str:
    """A Kernelbot GPU (an enum whose value or name is e.g. "H100", or a
    string) as the queue kbgen serve runs it on."""
    name = str(getattr(gpu_type, "value", None) or getattr(gpu_type, "name", None) or gpu_type)
    table = DEFAULT_QUEUES if queues is None else queues
    return table.get(name) or table.get(name.upper()) or name.lower()


async def run_submission(config: dict, gpu_type: Any, status: Any = None, **kw: Any) -> dict:
    """run_submission over the service named by KBGEN_SERVER / KBGEN_SERVER_TOKEN."""
    return await KbgenLauncher().run_submission(config, gpu_type, status, **kw)
