"""Kernelbot's own backend through the patched BuildkiteLauncher, kbgen serve and real builds.

Run by internal/e2e's TestKernelbotBackend (scripts/kernelbot-check.sh starts it) with
PYTHONPATH=<patched Kernelbot>/src, KBGEN_SERVER and KBGEN_SERVER_TOKEN set, KBGEN_TASK (a
Kernelbot task directory whose harness is plain Python: kbgen's examples/identity) and
KBGEN_GPU (the BuildkiteGPU whose queue the local agents serve). Every step uses Kernelbot's
code: make_task_definition, KernelBackend.handle_submission (build_task_config, the launcher,
make_short_report, generate_report), compute_score, get_runner_queue_status. Only the database
is left out (KernelBackend.__init__ connects to PostgreSQL), as Kernelbot's own
tests/test_backend.py does for its queue status tests.
"""

import asyncio
import os
import sys
import time
from pathlib import Path

import aiohttp

from libkernelbot import backend, consts, report
from libkernelbot.launchers import BuildkiteLauncher
from libkernelbot.submission import compute_score
from libkernelbot.task import make_task_definition

TASK = Path(os.environ["KBGEN_TASK"])
GPU = consts.get_gpu_by_name(os.environ["KBGEN_GPU"])


class Reporter(report.RunProgressReporter):
    """Kernelbot's RunProgressReporter with its Discord message kept in memory."""

    def __init__(self, title):
        super().__init__(title)
        self.reports = []
        self.messages = []

    async def _update_message(self):
        self.messages.append(self.get_message())

    async def display_report(self, title, run_report):
        self.reports.append((title, run_report))


def new_backend() -> backend.KernelBackend:
    bot = object.__new__(backend.KernelBackend)
    bot.launcher_map = {}
    bot.accepts_jobs = True
    bot.debug_mode = False
    bot.register_launcher(
        BuildkiteLauncher(url=os.environ["KBGEN_SERVER"], token=os.environ.get("KBGEN_SERVER_TOKEN"))
    )
    return bot


async def serve_health() -> dict:
    """kbgen serve's GET / over its unix socket (KBGEN_SERVER=unix:/path)."""
    connector = aiohttp.UnixConnector(path=os.environ["KBGEN_SERVER"].removeprefix("unix:"))
    async with aiohttp.ClientSession(connector=connector) as session:
        async with session.get("http://kbgen-serve/") as resp:
            return await resp.json(content_type=None)


def say(step, ok, detail):
    print(f"{'PASS' if ok else 'FAIL'}  {step}: {detail}", flush=True)
    return ok


async def leaderboard(bot, task) -> bool:
    reporter = Reporter(f"{GPU.name} on {GPU.runner}")
    code = (TASK / "submission.py").read_text()
    start = time.monotonic()
    result = await bot.handle_submission(
        GPU, reporter, code=code, name="submission.py", task=task,
        mode=consts.SubmissionMode.LEADERBOARD, submission_id=-1,
    )
    ok = result.success and result.runs["leaderboard"].run.passed
    score = compute_score(result, task, -1) if ok else None
    ok = ok and score is not None and score > 0 and reporter.reports and "✅ success" in reporter.title
    return say(
        "leaderboard", ok,
        f"success={result.success} error={result.error[-300:]!r} runs={sorted(result.runs)} score={score} s "
        f"({time.monotonic() - start:.1f}s) system.gpu={result.system.gpu!r} title={reporter.title!r} "
        f"progress={reporter.lines[0] if reporter.lines else None!r} report={reporter.reports[0][0] if reporter.reports else None!r}",
    )


async def failing(bot, task) -> bool:
    reporter = Reporter(f"{GPU.name} on {GPU.runner}")
    code = (TASK / "wrong.py").read_text()
    result = await bot.handle_submission(
        GPU, reporter, code=code, name="wrong.py", task=task,
        mode=consts.SubmissionMode.TEST, submission_id=-1,
    )
    run = result.runs.get("test")
    short = report.make_short_report(result.runs)
    ok = result.success and run is not None and not run.run.passed and any(line.startswith("❌") for line in short)
    return say("failing submission", ok, f"success={result.success} error={result.error[-300:]!r} passed={run and run.run.passed} short={short}")


async def cancelled(bot, task) -> bool:
    reporter = Reporter(f"{GPU.name} on {GPU.runner}")
    code = (TASK / "submission.py").read_text()
    job = asyncio.create_task(bot.handle_submission(
        GPU, reporter, code=code, name="submission.py", task=task,
        mode=consts.SubmissionMode.LEADERBOARD, submission_id=-1,
    ))
    # Cancel once the build runs (its bootstrap or eval job is on an agent), so the cancel
    # has to reach an agent, not just a build waiting in the queue.
    # The line that said so, not the newest one: under load the reporter may
    # already have printed the next state when the loop wakes.
    line = ""
    for _ in range(900):
        line = next((ln for ln in reporter.lines if "Buildkite build [" in ln and ": running" in ln), "")
        if line:
            break
        await asyncio.sleep(0.1)
    job.cancel()
    try:
        await job
        return say("cancelled task", False, "the task finished instead of being cancelled")
    except asyncio.CancelledError:
        pass
    build = line[line.index("[") + 1:line.index("]")] if "[" in line else ""
    # The launcher cancelled its run: wait for kbgen serve to report the build canceled.
    status = {}
    for _ in range(300):
        status = await serve_health()
        if status.get("open") == 0:
            break
        await asyncio.sleep(0.2)
    return say(
        "cancelled task", status.get("open") == 0 and ": running" in line,
        f"build {build} canceled while {line.split(': ', 1)[-1]!r}; serve health={status}",
    )


async def queue_status(bot) -> bool:
    status = await bot.get_runner_queue_status(GPU.name, {"lang": "py"})
    ok = status.runner == "Buildkite" and status.status == "available" and isinstance(status.queued_jobs, int)
    return say("get_runner_queue_status", ok, str(status.to_dict()))


async def main() -> int:
    task = make_task_definition(TASK).task
    bot = new_backend()
    results = [
        await queue_status(bot),
        await leaderboard(bot, task),
        await failing(bot, task),
        await cancelled(bot, task),
    ]
    print(f"{sum(results)} passed, {len(results) - sum(results)} failed", flush=True)
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
