"""Tests of kbgen_launcher against a real `kbgen serve` and the Buildkite
stand-in. Run by kernelbot_test.go (go test ./integrations/kernelbot), which
starts both and sets KBGEN_SERVER, KBGEN_SERVER_TOKEN and KBGEN_TEST_JOB."""

import asyncio
import json
import os
import unittest

import enum

from kbgen_launcher import KbgenError, KbgenLauncher, _queue_of, encode_config, run_submission


def job() -> dict:
    with open(os.environ["KBGEN_TEST_JOB"], encoding="utf-8") as f:
        return json.load(f)


class Status:
    """Kernelbot's RunProgressReporter, recorded."""

    def __init__(self):
        self.lines: list[str] = []
        self.created = asyncio.Event()

    async def push(self, text: str) -> None:
        self.lines.append(text)
        if text.startswith("Buildkite build"):
            self.created.set()

    async def update(self, text: str) -> None:
        self.lines[-1] = text


@unittest.skipUnless(os.environ.get("KBGEN_SERVER"), "run through go test ./integrations/kernelbot")
class LauncherTest(unittest.IsolatedAsyncioTestCase):
    async def test_result(self):
        status = Status()
        result = await run_submission(job(), "H100", status)
        self.assertTrue(result["success"], result)
        self.assertEqual(result["error"], "")
        self.assertIn("test", result["runs"])
        self.assertEqual(result["system"]["gpu"], "NVIDIA H100 80GB HBM3")
        self.assertTrue(status.lines and status.lines[0].startswith("Buildkite build"), status.lines)
        self.assertIn("passed", status.lines[-1])
        self.assertEqual(len(status.lines), 2, status.lines)

    async def test_same_run_id_attaches(self):
        launcher = KbgenLauncher()
        a, b = await asyncio.gather(
            launcher.run_submission(job(), "H100", None, run_id="py-same"),
            launcher.run_submission(job(), "H100", None, run_id="py-same"),
        )
        self.assertEqual(a, b)
        code, st = await asyncio.to_thread(launcher._call, "GET", "/v1/runs/py-same")
        self.assertEqual((code, st["status"]), (200, "obtained"))

    async def test_bad_token(self):
        with self.assertRaises(KbgenError):
            await KbgenLauncher(token="wrong").run_submission(job(), "H100", None)

    async def test_unknown_gpu(self):
        result = await run_submission(job(), "NoSuchGPU", None)
        self.assertFalse(result["success"])
        self.assertIn("refused", result["error"])

    async def test_cancel_cancels_the_build(self):
        launcher = KbgenLauncher()
        status = Status()
        task = asyncio.create_task(launcher.run_submission(job(), "H100", status, run_id="py-cancel"))
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

    async def test_gpu_enum(self):
        class GPU(enum.Enum):
            A100 = "A100"
        result = await run_submission(job(), GPU.A100, None)
        self.assertTrue(result["success"], result)

    def test_encoding_is_kernelbots(self):
        import base64
        import zlib
        cfg = {"lang": "py", "b": [1, 2]}
        self.assertEqual(json.loads(zlib.decompress(base64.b64decode(encode_config(cfg)))), cfg)


if __name__ == "__main__":
    unittest.main()


class QueueTest(unittest.TestCase):
    def test_queue_of(self):
        class GPU(enum.Enum):
            H100 = "H100"
            MI300 = "MI300"
        self.assertEqual(_queue_of(GPU.H100), "nvidia-h100")
        self.assertEqual(_queue_of(GPU.MI300), "amd-mi300")
        self.assertEqual(_queue_of("h100"), "nvidia-h100")
        self.assertEqual(_queue_of("nebius-h100"), "nebius-h100")
        self.assertEqual(_queue_of("H100", {"H100": "nebius-h100"}), "nebius-h100")
