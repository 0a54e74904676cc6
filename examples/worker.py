"""Runs the submission for eval.py: one JSON request per line on stdin, one
reply per line on the original stdout. The submission's own prints go to
stderr so they cannot forge replies by accident."""
import json
import os
import sys
import time

replies = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)
sys.stdout = sys.stderr


def reply(obj):
    replies.write(json.dumps(obj) + "\n")
    replies.flush()


try:
    from submission import custom_kernel
except BaseException as e:  # noqa: BLE001 - any import failure is the submission's
    custom_kernel = None
    import_error = f"importing submission failed: {type(e).__name__}: {e}"

for line in sys.stdin:
    request = json.loads(line)
    if custom_kernel is None:
        reply({"error": import_error})
        continue
    try:
        if request["op"] == "profile":
            import cProfile
            import io
            import pstats

            prof = cProfile.Profile()
            prof.enable()
            custom_kernel(request["data"])
            prof.disable()
            text = io.StringIO()
            pstats.Stats(prof, stream=text).sort_stats("cumulative").print_stats(15)
            reply({"report": text.getvalue()})
            continue
        durations = []
        output = None
        for i in range(max(1, int(request.get("repeat", 1)))):
            data = request["data"] if i == 0 else json.loads(json.dumps(request["data"]))
            start = time.perf_counter_ns()
            result = custom_kernel(data)
            durations.append(time.perf_counter_ns() - start)
            if i == 0:
                output = result
        reply({"output": output, "durations": durations})
    except BaseException as e:  # noqa: BLE001
        reply({"error": f"{type(e).__name__}: {e}"})
