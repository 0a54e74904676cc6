"""Evaluation harness for kbgen's built-in examples (Kernelbot's protocol).

    python3 eval.py <test|benchmark|leaderboard|profile> <cases file>

Verdicts go to the POPCORN_FD pipe as `key: value` lines. The submission
never runs in this process: a worker (worker.py) imports it without the
pipe, without POPCORN_* variables, and gets only the input of each case.
This process computes the reference from its own copy of the input and
decides pass or fail, so a submission can neither write the verdict nor
change what it is compared against.

Timings are taken here, never in the worker: each timed call is one
request and its reply, from writing the request to reading the whole
reply line, so a submission that replaces its clock, or writes its own
replies with made-up durations, changes nothing. The time includes
handing the input to the worker and the output back (JSON through a
pipe), the same for every submission of a task. Each request carries a
fresh nonce the reply must echo, so a reply written before its request
was read is refused. The profile report is the submission's process's
own (cProfile runs there): it is shown, never ranked.
"""
import base64
import json
import math
import os
import re
import secrets
import subprocess
import sys
import time

from reference import check_implementation, generate_input, ref_kernel

CASE_FIELD = re.compile(r"\s*([a-zA-Z]+):\s*([a-zA-Z]+|[+-]?[0-9]+)\s*")


def harden():
    # Not dumpable: a same-user process (the worker, anything it spawns)
    # cannot open /proc/<this pid>/fd/* or read /proc/<this pid>/environ.
    try:
        import ctypes

        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0
    except Exception:
        pass


class Popcorn:
    def __init__(self, fd):
        os.set_inheritable(fd, False)
        self.file = os.fdopen(fd, "w")

    def log(self, key, value):
        print(f"{key}: {value}", file=self.file, flush=True)

    def close(self):
        self.file.close()


def combine(a, b):
    # Kernelbot's Cantor pairing of a public test seed and the secret seed.
    return int(a + (a + b) * (a + b + 1) // 2)


def read_cases(path, secret):
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError as e:
        print(f"could not open cases file {path}: {e}", file=sys.stderr)
        sys.exit(113)
    cases = []
    for line in lines:
        args = {}
        for part in line.split(";"):
            m = CASE_FIELD.fullmatch(part)
            if not m:
                print(f"invalid test case: {line!r}: {part!r}", file=sys.stderr)
                sys.exit(113)
            try:
                args[m[1]] = int(m[2])
            except ValueError:
                args[m[1]] = m[2]
        if secret is not None and "seed" in args:
            args["seed"] = combine(args["seed"], secret)
        cases.append((line, args))
    return cases


class Worker:
    """The submission, in a process of its own."""

    def __init__(self):
        env = {k: v for k, v in os.environ.items() if not k.startswith("POPCORN_")}
        here = os.path.dirname(os.path.abspath(__file__))
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(here, "worker.py")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            close_fds=True,
            text=True,
        )

    def call(self, op, data):
        """Send one request; returns (reply, nanoseconds from sending the
        request to reading the whole reply)."""
        nonce = secrets.token_hex(16)
        message = json.dumps({"op": op, "data": data, "nonce": nonce}) + "\n"
        try:
            start = time.perf_counter_ns()
            self.proc.stdin.write(message)
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
            elapsed = time.perf_counter_ns() - start
            reply = json.loads(line)
        except (OSError, ValueError) as e:
            return {"error": f"the submission's process died or broke the protocol ({type(e).__name__})"}, 0
        if not isinstance(reply, dict):
            return {"error": "the submission's process broke the protocol"}, 0
        if reply.get("nonce") != nonce:
            return {"error": "the submission's process replied to a request it had not read (wrong nonce)"}, 0
        return reply, elapsed

    def close(self):
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def checked(worker, args, repeat=1):
    """Run one case repeat times, each output checked; returns (error
    message or None, durations in ns as measured by this process)."""
    expected = ref_kernel(generate_input(**args))
    durations = []
    for _ in range(repeat):
        reply, elapsed = worker.call("run", generate_input(**args))
        if "error" in reply:
            return str(reply["error"]), []
        ok, message = check_implementation(reply.get("output"), expected)
        if not ok:
            return message, []
        durations.append(float(elapsed))
    return None, durations


def stats(durations):
    n = len(durations)
    mean = sum(durations) / n
    std = math.sqrt(sum((d - mean) ** 2 for d in durations) / (n - 1)) if n > 1 else 0.0
    return {"runs": n, "mean": mean, "std": std, "err": std / math.sqrt(n),
            "best": min(durations), "worst": max(durations)}


def run_tests(log, worker, cases):
    passed = True
    log("test-count", len(cases))
    for i, (spec, args) in enumerate(cases):
        log(f"test.{i}.spec", spec)
        error, _ = checked(worker, args)
        if error is None:
            log(f"test.{i}.status", "pass")
        else:
            passed = False
            log(f"test.{i}.status", "fail")
            log(f"test.{i}.error", error)
    log("check", "pass" if passed else "fail")
    return 0 if passed else 112


def run_benchmarks(log, worker, cases, recheck):
    passed = True
    log("benchmark-count", len(cases))
    for i, (spec, args) in enumerate(cases):
        log(f"benchmark.{i}.spec", spec)
        durations = []
        error = None
        if recheck:
            # Fresh inputs for every timed run, each checked.
            for r in range(5):
                step = dict(args)
                if "seed" in step:
                    step["seed"] += 13 * r
                error, d = checked(worker, step)
                if error is not None:
                    break
                durations += d
        else:
            error, durations = checked(worker, args, repeat=10)
        if error is not None or not durations:
            passed = False
            log(f"benchmark.{i}.status", "fail")
            log(f"benchmark.{i}.error", error or "no timings")
            if recheck:
                break
            continue
        for key, value in stats(durations).items():
            log(f"benchmark.{i}.{key}", value)
    log("check", "pass" if passed else "fail")
    return 0 if passed else 112


def run_profile(log, worker, cases):
    log("benchmark-count", len(cases))
    for i, (spec, args) in enumerate(cases):
        log(f"benchmark.{i}.spec", spec)
        reply, _ = worker.call("profile", generate_input(**args))
        report = str(reply.get("report", reply.get("error", "")))
        log(f"benchmark.{i}.report", base64.b64encode(report.encode("utf-8")).decode("ascii"))
    log("check", "pass")
    return 0


def main():
    harden()
    fd = os.environ.pop("POPCORN_FD", "")
    if not fd:
        return 111
    if len(sys.argv) < 3:
        return 113
    mode = sys.argv[1].strip()
    seed = os.environ.pop("POPCORN_SEED", "")
    cases = read_cases(sys.argv[2], int(seed) if seed else None)
    print(f"Running in mode {mode}", flush=True)
    out = Popcorn(int(fd))
    worker = Worker()
    try:
        if mode == "test":
            return run_tests(out.log, worker, cases)
        if mode == "benchmark":
            return run_benchmarks(out.log, worker, cases, recheck=False)
        if mode == "leaderboard":
            return run_benchmarks(out.log, worker, cases, recheck=True)
        if mode == "profile":
            return run_profile(out.log, worker, cases)
        print(f"unknown mode {mode}", file=sys.stderr)
        return 113
    finally:
        worker.close()
        out.close()


if __name__ == "__main__":
    sys.exit(main())
