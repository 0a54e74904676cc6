# kbgen node qualify's GPU calibration (run by kbgen with python3; needs
# torch with CUDA or ROCm). The GPU is the first visible one: kbgen sets
# CUDA_VISIBLE_DEVICES to the agent's GPU.
#   calibrate RUNS REPS WINDOW_MS SIZE
#       -> one JSON line {"runs": [{"mean_ms": ...}, ...], "matmuls_per_sample": N}
#       Each of a run's REPS samples times N back-to-back matmuls with one
#       CUDA-event pair (N sized so a sample takes about WINDOW_MS: a
#       single 0.2 ms matmul measures launch jitter); times are per matmul.
#       A second of matmuls first brings the GPU up from idle clocks; each
#       window is followed by as long idle (half duty, under the power cap).
#   load SECONDS SIZE          -> matmuls until SECONDS pass
#   p2p MIB REPS               -> one JSON line {"pairs": [{"from": i, "to": j,
#       "peer": bool, "gbps": x}, ...]}: every ordered pair of the visible
#       GPUs (a multi-GPU agent's set), the best of REPS copies of MIB MiB
#       from i to j; peer is whether the runtime reports peer access.
import json
import sys
import time

import torch


def p2p(mib, reps):
    n = torch.cuda.device_count()
    pairs = []
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            src = torch.empty(mib << 20, dtype=torch.uint8, device=torch.device("cuda", i))
            dst = torch.empty(mib << 20, dtype=torch.uint8, device=torch.device("cuda", j))
            best = 0.0
            for _ in range(reps + 1):  # the first copy sets up the path
                torch.cuda.synchronize(i)
                torch.cuda.synchronize(j)
                t0 = time.perf_counter()
                dst.copy_(src)
                torch.cuda.synchronize(i)
                torch.cuda.synchronize(j)
                best = max(best, (mib << 20) / (time.perf_counter() - t0) / 1e9)
            pairs.append({"from": i, "to": j, "peer": torch.cuda.can_device_access_peer(i, j), "gbps": best})
            del src, dst
    print(json.dumps({"pairs": pairs}))


def main():
    mode = sys.argv[1]
    if not torch.cuda.is_available():
        print("torch sees no GPU", file=sys.stderr)
        sys.exit(75)
    if mode == "p2p":
        p2p(int(sys.argv[2]), int(sys.argv[3]))
        return
    dev = torch.device("cuda", 0)
    size = int(sys.argv[-1])
    a = torch.randn(size, size, device=dev, dtype=torch.float16)
    b = torch.randn(size, size, device=dev, dtype=torch.float16)
    if mode == "load":
        end = time.time() + float(sys.argv[2])
        while time.time() < end:
            for _ in range(20):
                torch.mm(a, b)
            torch.cuda.synchronize()
        return
    runs, reps, window_ms = int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])

    def timed(n):
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(n):
            torch.mm(a, b)
        stop.record()
        stop.synchronize()
        return start.elapsed_time(stop)

    warm_end = time.time() + 1.0
    while time.time() < warm_end:
        timed(20)
    n = max(1, int(window_ms / (timed(20) / 20) + 0.999))
    out = []
    for _ in range(runs):
        times = []
        for _ in range(reps):
            times.append(timed(n) / n)
            # Idle as long as the window: back to back, the H100 hit its
            # power cap and its clock swung (run CV 5-6 %, 0.214 ms per
            # matmul); at half duty CV 2.0-2.7 %, 0.187 ms.
            time.sleep(window_ms / 1000)
        out.append({"mean_ms": sum(times) / len(times), "min_ms": min(times)})
    print(json.dumps({"device": torch.cuda.get_device_name(0), "size": size, "matmuls_per_sample": n, "runs": out}))


main()
