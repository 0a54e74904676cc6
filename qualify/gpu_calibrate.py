# kbgen node qualify's GPU calibration (run by kbgen with python3; needs
# torch with CUDA or ROCm). The GPU is the first visible one: kbgen sets
# CUDA_VISIBLE_DEVICES to the agent's GPU.
#   calibrate RUNS REPS SIZE   -> one JSON line {"runs": [{"mean_ms": ...}, ...]}
#   load SECONDS SIZE          -> matmuls until SECONDS pass
import json
import sys
import time

import torch


def main():
    mode = sys.argv[1]
    if not torch.cuda.is_available():
        print("torch sees no GPU", file=sys.stderr)
        sys.exit(75)
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
    runs, reps = int(sys.argv[2]), int(sys.argv[3])
    for _ in range(10):
        torch.mm(a, b)
    torch.cuda.synchronize()
    out = []
    for _ in range(runs):
        times = []
        for _ in range(reps):
            start = torch.cuda.Event(enable_timing=True)
            stop = torch.cuda.Event(enable_timing=True)
            start.record()
            torch.mm(a, b)
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop))
        out.append({"mean_ms": sum(times) / len(times), "min_ms": min(times)})
    print(json.dumps({"device": torch.cuda.get_device_name(0), "size": size, "runs": out}))


main()
