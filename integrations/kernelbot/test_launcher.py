"""The patch's BuildkiteLauncher against a real `kbgen serve` and the Buildkite stand-in, with
the stand-in Kernelbot types of testdata/standin. Run by kernelbot_test.go (go test
./integrations/kernelbot), which lays out the tree and sets PYTHONPATH, KBGEN_SERVER,
KBGEN_SERVER_TOKEN and KBGEN_TEST_JOB."""

import asyncio
import datetime
import json
import os
import unittest

import aiohttp

from libkernelbot.consts import get_gpu_by_name
from libkernelbot.launchers import BuildkiteLauncher
from libkernelbot.launchers import buildkite
from libkernelbot.launchers.buildkite import KbgenError
from libkernelbot.report import RunProgressReporter
from libkernelbot.run_eval import EvalResult, FullResult


def job() -> dict:
    with open(os.environ["KBGEN_TEST_JOB"], encoding="utf-8") as f:
        return json.load(f)


class Reporter(RunProgressReporter):
    """Kernelbot's RunProgressReporter, recorded; created is set once the build link shows."""

    def __init__(self):
        super().__init__("H100_BK on Buildkite")
        self.created = asyncio.Event()

    async def update(self, new_content: str):
        await super().update(new_content)
        if "Buildkite build [" in new_content:
            self.created.set()


H100 = get_gpu_by_name("H100_BK")


def launcher(**kwargs) -> BuildkiteLauncher:
    settings = {"url": os.environ.get("KBGEN_SERVER"), "token": os.environ.get("KBGEN_SERVER_TOKEN")}
    return BuildkiteLauncher(**{**settings, **kwargs})


async def run_status(run_id: str) -> dict:
    """GET /v1/runs/{id} from the test's kbgen serve, beside the launcher."""
    headers = {"Authorization": f"Bearer {os.environ['KBGEN_SERVER_TOKEN']}"}
    async with aiohttp.ClientSession(headers=headers) as session:
        async with session.get(f"{os.environ['KBGEN_SERVER']}/v1/runs/{run_id}") as resp:
            return await resp.json()


@unittest.skipUnless(os.environ.get("KBGEN_SERVER"), "run through go test ./integrations/kernelbot")
class LauncherTest(unittest.IsolatedAsyncioTestCase):
    async def test_result(self):
        status = Reporter()
        result = await launcher().run_submission(job(), H100, status)
        self.assertIsInstance(result, FullResult)
        self.assertTrue(result.success, result)
        self.assertEqual(result.error, "")
        self.assertIsInstance(result.runs["test"], EvalResult)
        self.assertIsInstance(result.runs["test"].start, datetime.datetime)
        self.assertEqual(result.system.gpu, "NVIDIA H100 80GB HBM3")
        self.assertEqual(len(status.lines), 1, status.lines)
        self.assertIn("Buildkite build [", status.lines[0])
        self.assertTrue(status.lines[0].startswith("> ✅"), status.lines)

    async def test_same_run_id_attaches(self):
        one = launcher()
        a, b = await asyncio.gather(
            one.run_submission(job(), H100, None, run_id="py-same"),
            one.run_submission(job(), H100, None, run_id="py-same"),
        )
        self.assertEqual(a, b)
        st = await run_status("py-same")
        self.assertEqual((st["status"], st["state"]), ("obtained", "done"))
        self.assertGreater(st["build"], 0)

    async def test_bad_token(self):
        with self.assertRaisesRegex(KbgenError, r"refused the run \(401\)"):
            await launcher(token="wrong").run_submission(job(), H100, Reporter())

    async def test_unknown_gpu(self):
        with self.assertRaisesRegex(KbgenError, "H100 is not a Buildkite GPU"):
            await launcher().run_submission(job(), get_gpu_by_name("H100"), None)

    async def test_cancel_cancels_the_build(self):
        status = Reporter()
        task = asyncio.create_task(launcher().run_submission(job(), H100, status, run_id="py-cancel"))
        await asyncio.wait_for(status.created.wait(), 20)
        task.cancel()
        with self.assertRaises(asyncio.CancelledError):
            await task
        for _ in range(100):
            st = await run_status("py-cancel")
            if st.get("state") == "done":
                break
            await asyncio.sleep(0.1)
        self.assertEqual(st["status"], "timed_out", st)
        self.assertIn("canceled", st["result"]["error"])

    async def test_deadline_cancels_the_build(self):
        # A budget of 1.25 s (ranked_timeout 1, no start-up slack, 0.25 s of queue wait): the
        # stand-in's build takes 2 s, so the launcher's own deadline fires, before kbgen
        # serve's (the same deadline, counted from the create and seen at its next poll).
        slack, buildkite.STARTUP_SLACK = buildkite.STARTUP_SLACK, 0
        try:
            config = {**job(), "ranked_timeout": 1}
            with self.assertRaisesRegex(KbgenError, "py-deadline.*not done within its budget of 1.25s"):
                await launcher(queue_timeout=0.25).run_submission(config, H100, Reporter(), run_id="py-deadline")
        finally:
            buildkite.STARTUP_SLACK = slack
        for _ in range(100):
            st = await run_status("py-deadline")
            if st.get("state") == "done":
                break
            await asyncio.sleep(0.1)
        self.assertEqual(st["status"], "timed_out", st)

    async def test_queue_status(self):
        one = launcher()
        statuses = await asyncio.gather(*[one.get_queue_status(H100, {"lang": "py"}) for _ in range(20)])
        for s in statuses:
            self.assertEqual((s.runner, s.gpu, s.status), ("Buildkite", "H100_BK", "available"), s)
            self.assertEqual((s.running_jobs, s.available_runners), (1, 1), s)
            self.assertIsInstance(s.queued_jobs, int)

    async def test_queue_status_unreachable(self):
        s = await launcher(url="http://127.0.0.1:9").get_queue_status(H100)
        self.assertEqual((s.status, s.queued_jobs), ("unavailable", None))
        self.assertIn("ClientConnectorError", s.error)


if __name__ == "__main__":
    unittest.main()
