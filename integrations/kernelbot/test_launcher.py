"""The patch's BuildkiteLauncher against a real `kbgen serve` and the Buildkite stand-in, with
the stand-in Kernelbot types of testdata/standin. Run by kernelbot_test.go (go test
./integrations/kernelbot), which lays out the tree and sets PYTHONPATH, KBGEN_SERVER,
KBGEN_SERVER_TOKEN and KBGEN_TEST_JOB."""

import asyncio
import datetime
import json
import os
import unittest

from libkernelbot.consts import get_gpu_by_name
from libkernelbot.launchers import BuildkiteLauncher
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


@unittest.skipUnless(os.environ.get("KBGEN_SERVER"), "run through go test ./integrations/kernelbot")
class LauncherTest(unittest.IsolatedAsyncioTestCase):
    async def test_result(self):
        status = Reporter()
        result = await BuildkiteLauncher().run_submission(job(), H100, status)
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
        launcher = BuildkiteLauncher()
        a, b = await asyncio.gather(
            launcher.run_submission(job(), H100, None, run_id="py-same"),
            launcher.run_submission(job(), H100, None, run_id="py-same"),
        )
        self.assertEqual(a, b)
        code, st = await asyncio.to_thread(launcher._call, "GET", "/v1/runs/py-same")
        self.assertEqual((code, st["status"], st["build"]), (200, "obtained", st["build"]))

    async def test_bad_token(self):
        result = await BuildkiteLauncher(token="wrong").run_submission(job(), H100, Reporter())
        self.assertFalse(result.success)
        self.assertIn("(401)", result.error)

    async def test_unknown_gpu(self):
        result = await BuildkiteLauncher().run_submission(job(), get_gpu_by_name("H100"), None)
        self.assertFalse(result.success)
        self.assertIn("not a Buildkite GPU", result.error)

    async def test_cancel_cancels_the_build(self):
        launcher = BuildkiteLauncher()
        status = Reporter()
        task = asyncio.create_task(launcher.run_submission(job(), H100, status, run_id="py-cancel"))
        await asyncio.wait_for(status.created.wait(), 20)
        task.cancel()
        with self.assertRaises(asyncio.CancelledError):
            await task
        for _ in range(100):
            code, st = await asyncio.to_thread(launcher._call, "GET", "/v1/runs/py-cancel")
            if st.get("state") == "done":
                break
            await asyncio.sleep(0.1)
        self.assertEqual(st["status"], "timed_out", st)
        self.assertIn("canceled", st["result"]["error"])

    async def test_queue_status(self):
        launcher = BuildkiteLauncher()
        statuses = await asyncio.gather(*[launcher.get_queue_status(H100, {"lang": "py"}) for _ in range(20)])
        for s in statuses:
            self.assertEqual((s.runner, s.gpu, s.status), ("Buildkite", "H100_BK", "available"), s)
            self.assertEqual((s.running_jobs, s.available_runners), (1, 1), s)
            self.assertIsInstance(s.queued_jobs, int)

    async def test_queue_status_unreachable(self):
        s = await BuildkiteLauncher(url="http://127.0.0.1:9").get_queue_status(H100)
        self.assertEqual((s.status, s.queued_jobs), ("unavailable", None))
        self.assertIn("unreachable", s.error)


if __name__ == "__main__":
    unittest.main()
