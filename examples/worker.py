"""Runs the submission for eval.py: one JSON request per line on stdin, one
reply per line on the original stdout, echoing the request's nonce. The
submission's own prints go to stderr so they cannot forge replies by
accident. Nothing is timed here: this process is the submission's, so
eval.py times each request from outside."""
import json
import os
import sys

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
    nonce = request.get("nonce")
    if custom_kernel is None:
        reply({"error": import_error, "nonce": nonce})
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
            reply({"report": text.getvalue(), "nonce": nonce})
            continue
        reply({"output": custom_kernel(request["data"]), "nonce": nonce})
    except BaseException as e:  # noqa: BLE001
        reply({"error": f"{type(e).__name__}: {e}", "nonce": nonce})
