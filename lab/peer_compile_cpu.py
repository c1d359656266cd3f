"""Does a shape torch.compile'd by a peer_compile worker load from Inductor's caches in the bench's
process? Checked on a machine without a GPU: the peer built on CPU tensors (Inductor's C++
backend; its FX graph and AOTAutograd caches are the ones the CUDA backend uses), the workers spawned
as the bench spawns them.

    PYTHONPATH=. python lab/peer_compile_cpu.py    # needs torch; writes nothing but stdout

Prints, per shape, the seconds the bench's process took to compile and run the peer and
Inductor's cache counters: hits where a worker compiled the shape, misses where none did.
"""
import os
import sys
import tempfile
import time

os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="inductor-"))


def on_cpu():
    import torch

    from rmsnorm_lessons.speed import peers

    peers._device = lambda torch: torch.device("cpu")
    torch.cuda.synchronize = lambda *a: None


def compile_on_cpu(N, C):  # a worker's task
    on_cpu()
    from rmsnorm_lessons.speed import peer_compile

    return peer_compile.compile_shape(N, C)


def main():
    import torch
    from torch._dynamo.utils import counters

    from rmsnorm_lessons.speed import peer_compile, peers

    on_cpu()
    ahead_shapes = [(64, 768), (32, 1024)]
    started = time.perf_counter()
    with peer_compile.Ahead(ahead_shapes, workers=2, task=compile_on_cpu) as ahead:
        for N, C in [(16, 512)] + ahead_shapes + [(8, 2048)]:
            waited = ahead.wait(N, C)
            counters.clear()
            t = time.perf_counter()
            fn = peers.compiled_function(C)
            x = torch.randn(N, C, dtype=torch.bfloat16, requires_grad=True)
            w = torch.randn(C, dtype=torch.bfloat16, requires_grad=True)
            y = fn(x, w)
            torch.autograd.grad(y, (x, w), torch.randn_like(y), retain_graph=True)
            worker = "none" if waited is None else f"{waited:.1f} s"
            print(f"{N}x{C}: {time.perf_counter() - t:5.1f} s in the bench's process "
                  f"(worker: {worker}); inductor {dict(counters['inductor'])}", flush=True)
    print(f"total {time.perf_counter() - started:.1f} s; torch {torch.__version__}")


if __name__ == "__main__":
    sys.exit(main())
