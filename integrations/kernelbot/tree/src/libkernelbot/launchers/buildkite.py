"""Buildkite launcher: runs submissions on vendor-donated GPUs through `kbgen serve`.

kbgen (https://github.com/gpu-mode/kbgen) turns one submission into one Buildkite
build on the GPU's queue and evaluates it with Kernelbot's own protocol; `kbgen serve`,
run beside the backend, creates the builds, watches all of them with one poller within
the organization's API budget, and survives restarts. This launcher is its client, over
aiohttp as the rest of Kernelbot:

    KBGEN_SERVER=http://127.0.0.1:8077 KBGEN_SERVER_TOKEN=... python src/kernelbot/main.py

A run that ran returns its FullResult; a run that could not run (kbgen serve or Buildkite
unreachable, the build failed or was lost, the deadline passed) raises KbgenError naming
the cause and the run id, as the GitHub launcher raises for its workflow.
"""

import asyncio
import base64
import dataclasses
import datetime
import json
import time
import urllib.parse
import uuid
import zlib

import aiohttp

from libkernelbot.consts import (
    BUILDKITE_QUEUES,
    DEFAULT_GITHUB_TIMEOUT_MINUTES,
    GPU,
    BuildkiteGPU,
    SubmissionMode,
)
from libkernelbot.report import RunProgressReporter
from libkernelbot.run_eval import (
    CompileResult,
    EvalResult,
    FullResult,
    ProfileResult,
    RunResult,
    SystemInfo,
)
from libkernelbot.utils import KernelBotError, setup_logging

from .launcher import Launcher, RunnerQueueStatus

logger = setup_logging(__name__)

# A run's budget, in seconds: the mode's own timeout from the task (test_timeout,
# benchmark_timeout, ranked_timeout, chosen as the GitHub launcher's get_timeout chooses
# them, without its 10-minute floor; DEFAULT_MODE_TIMEOUT for a mode without one) plus
# STARTUP_SLACK (build creation, the bootstrap, image start, compilation) plus the
# launcher's queue_timeout (waiting for a free agent). kbgen serve cancels a build not done
# by then, and the launcher enforces the same deadline itself.
DEFAULT_MODE_TIMEOUT = DEFAULT_GITHUB_TIMEOUT_MINUTES * 60
STARTUP_SLACK = 120
DEFAULT_QUEUE_TIMEOUT = 600
# The API path's hard timeout (background_submission_manager.HARD_TIMEOUT_SEC): every budget
# stays HARD_TIMEOUT_MARGIN under it, so the launcher's own deadline fires first and cancels
# the build instead of leaving it to run after Kernelbot gave up.
API_HARD_TIMEOUT = 30 * 60
HARD_TIMEOUT_MARGIN = 60
MAX_BUDGET = API_HARD_TIMEOUT - HARD_TIMEOUT_MARGIN

# Seconds one HTTP request to kbgen serve may take.
REQUEST_TIMEOUT = 30
# Seconds the event stream may stay silent: kbgen serve writes a heartbeat line at most every
# 20 s, so a longer silence is a half-open connection; the launcher reconnects.
STREAM_READ_TIMEOUT = 60
# Seconds kbgen serve may stay unreachable (a restart) before a run gives up. Every
# successful (re)connect ends an outage: only connections that fail count.
OUTAGE_TOLERANCE = 120
RECONNECT_DELAYS = (0.2, 0.5, 1.0, 2.0, 5.0)

SCHEMES = ("http://", "https://", "unix:")


class KbgenError(KernelBotError):
    """A Buildkite run that could not run, or kbgen serve that could not be used. The
    message names the cause and the run id; it is safe to show (no token, no secret)."""

    def __init__(self, message: str, run_id: str | None = None):
        super().__init__(message, code=503)
        self.run_id = run_id


class _RunFailed(Exception):
    """Why a run could not run; run_submission shows it and raises KbgenError."""


class _Refused(Exception):
    """kbgen serve answered a request with an error that retrying cannot fix."""

    def __init__(self, status: int, error: str):
        super().__init__(f"({status}) {error}")
        self.status = status


class BuildkiteLauncher(Launcher):
    """A client of one `kbgen serve`: url http://127.0.0.1:PORT, https://host, or unix:/path.
    Without a url the launcher is registered but every Buildkite submission fails saying
    that this instance has no kbgen serve (KBGEN_SERVER is unset)."""

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        queue_timeout: float | str | None = None,
        *,
        outage_tolerance: float = OUTAGE_TOLERANCE,
        stream_read_timeout: float = STREAM_READ_TIMEOUT,
    ):
        super().__init__(name="Buildkite", gpus=BuildkiteGPU)
        self.url = (url or "").strip() or None
        self.token = (token or "").strip()
        self.queue_timeout = _seconds("KBGEN_QUEUE_TIMEOUT", queue_timeout, DEFAULT_QUEUE_TIMEOUT)
        if self.queue_timeout + STARTUP_SLACK >= MAX_BUDGET:
            raise ValueError(
                f"KBGEN_QUEUE_TIMEOUT={self.queue_timeout:g}s leaves no time to run: a run's "
                f"budget must stay under {MAX_BUDGET}s (Kernelbot's API gives up after "
                f"{API_HARD_TIMEOUT}s)"
            )
        self.outage_tolerance = outage_tolerance
        self.stream_read_timeout = stream_read_timeout
        if self.url is not None:
            self._check_server()

    def _check_server(self) -> None:
        """Refuse, at start, settings no request could succeed with."""
        if not self.url.startswith(SCHEMES):
            raise ValueError(
                f"KBGEN_SERVER={self.url!r} is not a kbgen serve URL: it must start with "
                "http://, https:// or unix: (e.g. http://127.0.0.1:8077, "
                "unix:/run/kbgen/serve.sock)"
            )
        if self.url.startswith("unix:"):
            if not self.url[len("unix:") :]:
                raise ValueError("KBGEN_SERVER=unix: names no socket path")
        elif not urllib.parse.urlsplit(self.url).hostname:
            raise ValueError(f"KBGEN_SERVER={self.url!r} names no host")
        elif not self.token:
            # kbgen serve requires a token on TCP; a unix socket is guarded by its file mode.
            raise ValueError(
                "KBGEN_SERVER_TOKEN is not set: kbgen serve on TCP requires its bearer token"
            )

    # --- the launcher ---------------------------------------------------------------

    def budget(self, config: dict) -> float:
        """Seconds a run of config may take from its submission, queue wait included."""
        mode = config.get("mode")
        per_mode = {
            SubmissionMode.TEST.value: config.get("test_timeout"),
            SubmissionMode.BENCHMARK.value: config.get("benchmark_timeout"),
            SubmissionMode.LEADERBOARD.value: config.get("ranked_timeout"),
        }
        total = (per_mode.get(mode) or DEFAULT_MODE_TIMEOUT) + STARTUP_SLACK + self.queue_timeout
        if total > MAX_BUDGET:
            logger.warning(
                "a %s run would need %.0fs; capped at %ds (Kernelbot's API timeout is %ds)",
                mode,
                total,
                MAX_BUDGET,
                API_HARD_TIMEOUT,
            )
            total = MAX_BUDGET
        return float(total)

    async def run_submission(
        self, config: dict, gpu_type: GPU, status: RunProgressReporter, *, run_id: str | None = None
    ) -> FullResult:
        """Run one job on gpu_type's queue and return its FullResult, or raise KbgenError when
        it could not run. run_id names the run: the same id again attaches to the same build
        (Kernelbot passes none, so each call is a new run)."""
        queue = self._queue(gpu_type)
        run_id = run_id or f"kb-{uuid.uuid4().hex[:16]}"
        budget = self.budget(config)
        request = {
            "run_id": run_id,
            "queue": queue,
            "payload": encode_config(config),
            "timeout_seconds": budget,
        }
        progress = _Progress(status, run_id)
        logger.info(
            "Buildkite run %s: %s %s on queue %s via kbgen serve %s, budget %.0fs",
            run_id,
            config.get("mode"),
            gpu_type.name,
            queue,
            self.url,
            budget,
        )
        await progress.start(queue)
        async with self._session() as session:
            api = _Api(self, session, run_id)
            try:
                async with asyncio.timeout(budget):
                    final = await self._run(api, request, progress)
            except _RunFailed as e:
                raise await progress.fail(str(e)) from None
            except TimeoutError:
                # Inner requests handle their own timeouts: this is the run's deadline.
                await asyncio.shield(api.cancel("deadline"))
                raise await progress.fail(
                    f"not done within its budget of {budget:g}s (queue wait included); "
                    "the build was canceled"
                ) from None
            except asyncio.CancelledError:
                # Kernelbot gave up on the submission (shutdown, its own timeout): stop the
                # build too, even when the create is still in flight (the id is ours).
                await asyncio.shield(api.cancel("the Kernelbot task was cancelled"))
                raise
        return await progress.finished(final)

    async def get_queue_status(
        self, gpu_type: GPU, config: dict | None = None
    ) -> RunnerQueueStatus:
        """The queue's backlog and agents from kbgen serve's cached view (no Buildkite
        request). Never raises: whatever goes wrong is an "unavailable" status with why."""
        try:
            queue = self._queue(gpu_type)
            async with self._session() as session:
                body = await _Api(self, session, "").call(
                    "GET", f"/v1/queues/{urllib.parse.quote(queue)}"
                )
            return RunnerQueueStatus(
                runner=self.name,
                gpu=gpu_type.name,
                queued_jobs=int(body["waiting"]),
                running_jobs=int(body["running"]),
                available_runners=int(body["idle"]),
            )
        except Exception as e:  # noqa: BLE001 - a status page must not fail
            logger.warning("Buildkite queue status of %s unavailable: %r", gpu_type.name, e)
            return RunnerQueueStatus(
                runner=self.name,
                gpu=gpu_type.name,
                queued_jobs=None,
                status="unavailable",
                error=_describe(e),
            )

    # --- one run --------------------------------------------------------------------

    def _queue(self, gpu_type: GPU) -> str:
        if self.url is None:
            raise KbgenError(
                f"{gpu_type.name} runs on Buildkite, which this Kernelbot instance does not "
                "use (KBGEN_SERVER is not set)"
            )
        queue = BUILDKITE_QUEUES.get(gpu_type.value)
        if queue is None:
            raise KbgenError(f"{gpu_type.name} is not a Buildkite GPU")
        return queue

    def _session(self) -> "_BaseSession":
        if self.url.startswith("unix:"):
            connector = aiohttp.UnixConnector(path=self.url[len("unix:") :])
            base = "http://kbgen-serve"
        else:
            connector, base = aiohttp.TCPConnector(), self.url.rstrip("/")
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        return _BaseSession(base, connector, headers)

    async def _run(self, api: "_Api", request: dict, progress: "_Progress") -> dict:
        await api.create(request)
        return await self._follow(api, request, progress)

    async def _follow(self, api: "_Api", request: dict, progress: "_Progress") -> dict:
        """Stream the run's events until it is done, riding out restarts of the service and
        silent streams; return its final status (GET /v1/runs/{id})."""
        quiet = 0
        while True:
            before = api.seen
            ended = await api.stream(progress)
            # Back off while streams end without news (a service that keeps closing them).
            quiet = 0 if api.seen > before else quiet + 1
            if ended.connected:
                state = await api.status_if_reachable()
                if state is not None and state.get("state") == "done":
                    return state
                if state is not None and state.get("state") == "missing":
                    # A restarted service that never created the build: submit it again
                    # (the run id makes that safe).
                    logger.info(
                        "Buildkite run %s: unknown to kbgen serve; submitting again", api.run_id
                    )
                    await api.create(request)
            await api.pause(quiet)


class _Ended:
    """How one event stream ended: whether the service answered, whether it said done."""

    def __init__(self, connected: bool, done: bool = False):
        self.connected, self.done = connected, done


class _Api:
    """kbgen serve's HTTP API for one run, with the outage clock: the time since the last
    successful request. Only failed connections and 5xx answers start it; every answer
    from the service (a reconnect included) stops it."""

    def __init__(self, launcher: BuildkiteLauncher, session: "_BaseSession", run_id: str):
        self.launcher, self.session, self.run_id = launcher, session, run_id
        self.down_since: float | None = None
        self.attempt = 0
        self.seen = 0  # events of the stream read so far: where a reconnect resumes

    def _reached(self) -> None:
        if self.down_since is not None:
            logger.info("Buildkite run %s: kbgen serve reachable again", self.run_id)
        self.down_since, self.attempt = None, 0

    def _unreachable(self, why: BaseException | str) -> None:
        now = time.monotonic()
        if self.down_since is None:
            self.down_since = now
            logger.warning(
                "Buildkite run %s: kbgen serve unreachable: %s", self.run_id, _describe(why)
            )
        if now - self.down_since > self.launcher.outage_tolerance:
            raise _RunFailed(
                f"kbgen serve unreachable for {self.launcher.outage_tolerance:g}s "
                f"({_describe(why)}); the build, if any, is canceled by kbgen serve when no "
                "client re-attaches"
            )

    async def pause(self, quiet: int = 0) -> None:
        """Wait before the next try: longer the more tries failed or brought nothing new."""
        step = max(self.attempt, quiet)
        await asyncio.sleep(RECONNECT_DELAYS[min(step, len(RECONNECT_DELAYS) - 1)])
        self.attempt += 1

    async def call(self, method: str, path: str, body: dict | None = None) -> dict:
        """One request; raises _Refused for a 4xx answer, aiohttp/OS errors as they come."""
        timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT)
        async with self.session.request(method, path, json=body, timeout=timeout) as resp:
            raw = await resp.read()
            answer = _json_object(raw)
            if resp.status >= 400:
                error = answer.get("error") if answer else raw[:300].decode(errors="replace")
                if resp.status >= 500:
                    raise aiohttp.ClientResponseError(
                        resp.request_info, (), status=resp.status, message=str(error)
                    )
                raise _Refused(resp.status, str(error))
            return answer or {}

    async def create(self, request: dict) -> None:
        """POST the run until kbgen serve answers (idempotent: the id names it)."""
        while True:
            try:
                st = await self.call("POST", "/v1/runs", request)
                self._reached()
                logger.info(
                    "Buildkite run %s: accepted by kbgen serve (%s)", self.run_id, st.get("state")
                )
                return
            except _Refused as e:
                raise _RunFailed(f"kbgen serve refused the run {e}") from None
            except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as e:
                self._unreachable(e)
            await self.pause()

    async def status_if_reachable(self) -> dict | None:
        try:
            st = await self.call("GET", f"/v1/runs/{self.run_id}")
            self._reached()
            return st
        except _Refused as e:
            if e.status == 404:
                self._reached()
                return {"state": "missing"}
            raise _RunFailed(f"kbgen serve refused the run's status {e}") from None
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as e:
            self._unreachable(e)
            return None

    async def stream(self, progress: "_Progress") -> _Ended:
        """Follow GET /v1/runs/{id}/events from event self.seen until done, EOF, silence
        longer than the read timeout, or an error."""
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=REQUEST_TIMEOUT, sock_read=self.launcher.stream_read_timeout
        )
        path = f"/v1/runs/{self.run_id}/events?from={self.seen}"
        opened = False
        try:
            async with self.session.request("GET", path, timeout=timeout) as resp:
                if resp.status != 200:
                    return await self._not_a_stream(resp)
                self._reached()
                opened = True
                return await self._read(resp, progress)
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError, ValueError) as e:
            if opened and isinstance(e, asyncio.TimeoutError):
                logger.info(
                    "Buildkite run %s: event stream silent for %gs; reconnecting",
                    self.run_id,
                    self.launcher.stream_read_timeout,
                )
                return _Ended(connected=True)
            if opened:
                logger.info(
                    "Buildkite run %s: event stream broke (%s); reconnecting",
                    self.run_id,
                    _describe(e),
                )
            self._unreachable(e)
            return _Ended(connected=False)

    async def _not_a_stream(self, resp: aiohttp.ClientResponse) -> _Ended:
        """An answer other than 200 to the event stream request."""
        if resp.status >= 500:
            self._unreachable(f"HTTP {resp.status}")
            return _Ended(connected=False)
        self._reached()
        if resp.status == 404:  # the caller asks for the run's status and submits it again
            return _Ended(connected=True)
        body = _json_object(await resp.read()) or {}
        raise _RunFailed(
            f"kbgen serve refused the event stream ({resp.status}) {body.get('error', '')}"
        )

    async def _read(self, resp: aiohttp.ClientResponse, progress: "_Progress") -> _Ended:
        """The stream's events until done or EOF, counted in self.seen for a reconnect (also
        when the read ends in an error)."""
        async for raw in resp.content:
            event = parse_event(raw)
            if event is None:
                continue  # a heartbeat, a blank line, or a line this launcher cannot read
            self.seen += 1
            if event.get("event") == "done":
                return _Ended(connected=True, done=True)
            await progress.event(event)
        return _Ended(connected=True)

    async def cancel(self, why: str) -> None:
        """DELETE the run; logs, never raises (it runs while a task is being cancelled)."""
        try:
            st = await asyncio.wait_for(
                self.call("DELETE", f"/v1/runs/{self.run_id}"), REQUEST_TIMEOUT
            )
            logger.info(
                "Buildkite run %s canceled (%s): %s",
                self.run_id,
                why,
                st.get("status", st.get("state")),
            )
        except _Refused as e:
            # 404: the create never reached the service; it cancels a run nobody attaches to.
            logger.info("Buildkite run %s: cancel (%s) answered %s", self.run_id, why, e)
        except Exception as e:  # noqa: BLE001
            logger.warning(
                "Buildkite run %s: could not cancel (%s): %s", self.run_id, why, _describe(e)
            )


class _BaseSession:
    """aiohttp.ClientSession with kbgen serve's base URL and bearer token (aiohttp's own
    base_url needs 3.8+ and no unix: scheme)."""

    def __init__(self, base: str, connector: aiohttp.BaseConnector, headers: dict):
        self.base = base
        self.session = aiohttp.ClientSession(connector=connector, headers=headers)

    def request(self, method: str, path: str, **kwargs):
        return self.session.request(method, self.base + path, **kwargs)

    async def __aenter__(self) -> "_BaseSession":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.session.close()


def parse_event(raw: bytes) -> dict | None:
    """One line of the event stream as an event, or None for a line to skip: blank lines,
    heartbeats, and anything that is not a JSON object with a string "event"."""
    try:
        event = json.loads(raw)
    except ValueError:
        if raw.strip():
            logger.debug("kbgen serve sent an unreadable event line, ignored: %r", raw[:200])
        return None
    if not isinstance(event, dict) or not isinstance(event.get("event"), str):
        return None
    if event["event"] == "heartbeat":
        return None
    return event


def _json_object(raw: bytes) -> dict | None:
    try:
        answer = json.loads(raw or b"{}")
    except ValueError:
        return None
    return answer if isinstance(answer, dict) else None


def _describe(e: BaseException | str) -> str:
    if isinstance(e, str):
        return e
    if isinstance(e, KernelBotError):
        return str(e)
    if isinstance(e, (asyncio.TimeoutError, aiohttp.ServerTimeoutError)):
        return f"no answer within {REQUEST_TIMEOUT}s"
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


def _seconds(name: str, value: float | str | None, default: float) -> float:
    if value is None or (isinstance(value, str) and not value.strip()):
        return float(default)
    try:
        seconds = float(value)
    except ValueError:
        raise ValueError(f"{name}={value!r} is not a number of seconds") from None
    if not seconds > 0:
        raise ValueError(f"{name}={value!r} must be a positive number of seconds")
    return seconds


def encode_config(config: dict) -> str:
    """The payload as Kernelbot's GitHub launcher encodes it: base64(zlib(json))."""
    return base64.b64encode(zlib.compress(json.dumps(config).encode("utf-8"))).decode("ascii")


class UnknownFields(ValueError):
    """A result field Kernelbot's dataclasses do not have (strict conversion only)."""


def _make(cls, data: dict, where: str, strict: bool):
    """cls(**data) with the fields cls has; a field it lacks is an error when strict, else
    ignored with a log line (a newer kbgen may add fields before Kernelbot learns them)."""
    if not isinstance(data, dict):
        raise ValueError(f"{where} is {type(data).__name__}, not an object")
    known = {f.name for f in dataclasses.fields(cls)}
    extra = sorted(set(data) - known)
    if extra:
        if strict:
            raise UnknownFields(f"{where} has fields {cls.__name__} lacks: {', '.join(extra)}")
        logger.info("kbgen result: %s fields %s unknown to Kernelbot, ignored", where, extra)
    return cls(**{k: v for k, v in data.items() if k in known})


def to_full_result(data: dict, build_url: str | None = None, *, strict: bool = False) -> FullResult:
    """kbgen's result.json (Kernelbot's FullResult, field for field) as Kernelbot's
    dataclasses. A profile run's download_url becomes the build's page, which a person can
    open (kbgen's artifact link is a Buildkite API URL that needs a token); its trace rides
    along in `trace` as with Kernelbot's other launchers."""
    runs = {}
    for key, v in (data.get("runs") or {}).items():
        where = f"runs[{key!r}]"
        if not isinstance(v, dict):
            raise ValueError(f"{where} is not an object")
        profile = None
        if v.get("profile") is not None:
            profile = _make(ProfileResult, v["profile"], where + ".profile", strict)
            profile.download_url = build_url or None
        known = {f.name for f in dataclasses.fields(EvalResult)}
        if strict and set(v) - known:
            raise UnknownFields(
                f"{where} has fields EvalResult lacks: {', '.join(sorted(set(v) - known))}"
            )
        runs[key] = EvalResult(
            start=datetime.datetime.fromisoformat(v["start"]),
            end=datetime.datetime.fromisoformat(v["end"]),
            compilation=None
            if v.get("compilation") is None
            else _make(CompileResult, v["compilation"], where + ".compilation", strict),
            run=None
            if v.get("run") is None
            else _make(RunResult, v["run"], where + ".run", strict),
            profile=profile,
        )
    top = {f.name for f in dataclasses.fields(FullResult)}
    if strict and set(data) - top:
        raise UnknownFields(
            f"the result has fields FullResult lacks: {', '.join(sorted(set(data) - top))}"
        )
    return FullResult(
        success=bool(data.get("success")),
        error=data.get("error") or "",
        system=_make(SystemInfo, data.get("system") or {}, "system", strict),
        runs=runs,
    )


class _Progress:
    """The run's line on Kernelbot's RunProgressReporter (pushed once, then updated in place
    with the build link and its state) and the log lines of its state changes."""

    def __init__(self, status: RunProgressReporter | None, run_id: str):
        self.status = status
        self.run_id = run_id
        self.build = ""
        self.url = ""
        # The build's state and its eval job's are kept apart: a job event right after a
        # build event must not hide that the build runs.
        self.states = {"state": "submitted", "job": "", "budget": ""}

    async def _show(self, text: str, push: bool = False) -> None:
        if self.status is None:
            return
        if push:
            await self.status.push(text)
        else:
            await self.status.update(text)

    def _link(self) -> str:
        return f"Buildkite build [{self.build}](<{self.url}>)" if self.build else "Buildkite run"

    def _state(self) -> str:
        text = self.states["state"]
        if self.states["job"]:
            text += f", eval job {self.states['job']}"
        if self.states["budget"]:
            text += f", {self.states['budget']}"
        return text

    async def start(self, queue: str) -> None:
        await self._show(f"⏳ Submitting to Buildkite queue `{queue}`...", push=True)

    async def event(self, e: dict) -> None:
        kind = e.get("event")
        if kind == "created":
            self.build, self.url = str(e.get("build", "")), str(e.get("url", ""))
            self.states["state"] = "created"
            logger.info("Buildkite run %s: build %s %s", self.run_id, self.build, self.url)
        elif kind in ("state", "job", "budget", "canceled"):
            state = "canceled" if kind == "canceled" else str(e.get("state", ""))
            self.states.update({"budget": "", kind if kind != "canceled" else "state": state})
            log = logger.warning if kind == "canceled" else logger.info
            why = f": {e['error']}" if e.get("error") else ""
            log("Buildkite run %s: build %s %s %s%s", self.run_id, self.build, kind, state, why)
        else:
            return  # an event kind this launcher does not show
        try:
            elapsed = float(e.get("elapsed", 0))
        except (TypeError, ValueError):
            elapsed = 0.0
        await self._show(f"⏳ {self._link()}: {self._state()} ({elapsed:.1f}s)")

    async def fail(self, why: str) -> KbgenError:
        """The error to raise for a run that could not run, shown and logged first."""
        where = f" (build {self.build} {self.url})" if self.build else ""
        message = f"Buildkite run {self.run_id}{where}: {why}"
        logger.error("%s", message)
        await self._show(f"❌ {self._link()}: {why}")
        return KbgenError(message, self.run_id)

    async def finished(self, final: dict) -> FullResult:
        self.url = self.url or str(final.get("url") or "")
        self.build = self.build or str(final.get("build") or "")
        data = final.get("result")
        outcome = final.get("status") or "no status"
        if data is None:
            raise await self.fail(
                f"ended ({outcome}) without a result: {final.get('result_gone') or 'none kept'}"
            )
        if not isinstance(data, dict) or not data.get("success"):
            error = data.get("error") if isinstance(data, dict) else "not a result"
            raise await self.fail(f"{outcome}: {error or 'the runner reported no error'}")
        try:
            result = to_full_result(data, self.url or None)
        except (KeyError, TypeError, ValueError) as e:
            raise await self.fail(f"returned a result Kernelbot cannot read: {e!r}") from None
        logger.info(
            "Buildkite run %s: build %s %s, runs %s",
            self.run_id,
            self.build,
            final.get("build_state") or outcome,
            sorted(result.runs),
        )
        await self._show(f"✅ {self._link()}: {final.get('build_state') or outcome}")
        return result
