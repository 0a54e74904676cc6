"""The canary's work: the CPU walk (its checksum is the answer) and, where
torch sees a GPU, a fixed chain of matmuls timed with it."""
from reference import walk
from task import input_t, output_t

try:
    import torch

    GPU = torch.cuda.is_available()
except Exception:  # noqa: BLE001 - no torch, or a torch without a GPU
    GPU = False

MATMUL = 2048
CHAIN = 16


def gpu_chain():
    a = torch.full((MATMUL, MATMUL), 1.0 / MATMUL, device="cuda")
    b = a
    for _ in range(CHAIN):
        b = a @ b
    torch.cuda.synchronize()


def custom_kernel(data: input_t) -> output_t:
    if GPU:
        gpu_chain()
    return walk(data["iters"], data["seed"])


if __name__ == "__main__":
    print("warm-up: nothing to compile" + (", GPU visible" if GPU else ", no GPU"))
