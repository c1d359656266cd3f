"""The torch.compile peer compiled ahead of its turn, in other processes, while the bench times the
versions.

torch.compile spends seconds per shape tracing, generating and compiling its kernels (static
shapes: every shape is a new compilation), and the bench asks it for ten shapes. Inductor keeps
what it compiled on disk (its FX graph and AOTAutograd caches, Triton's kernel cache and the
configurations its reductions chose), keyed by the graph, the shapes and its settings: a process
that compiles the same function at a shape another process compiled finds the result there and
only loads it. :class:`Ahead` starts a pool of worker processes (``spawn``: the bench's process
holds a CUDA context, which a forked child must not touch) that each compile
:func:`peers.compiled_function` at one shape and run one forward and backward on it (the backward
is compiled at its first call). The bench's own :func:`peers.compiled_function` at that shape then
waits for the worker (:meth:`Ahead.wait`) and loads what it made.

Only the default mode is compiled ahead: max-autotune times its candidate kernels on the GPU, which
beside the versions' timings would disturb them. What a worker runs on the GPU otherwise is one
forward and backward per shape, and the few launches Inductor's reductions take to choose among
their configurations.
"""
from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
import sys
import time

AHEAD = ("torch.compile",)  # the peers compiled ahead (default mode only)


def compile_shape(N: int, C: int, mode: str | None = None) -> float:
    """In a worker: compile the peer at N x C, run it forward and backward once; the seconds it
    took."""
    from . import peers

    torch = peers._torch()
    started = time.perf_counter()
    device = peers._device(torch)
    fn = peers.compiled_function(C, mode)
    x = torch.randn(N, C, dtype=torch.bfloat16, device=device, requires_grad=True)
    w = torch.randn(C, dtype=torch.bfloat16, device=device, requires_grad=True)
    y = fn(x, w)
    torch.autograd.grad(y, (x, w), torch.randn_like(y), retain_graph=True)
    torch.cuda.synchronize(device)
    return time.perf_counter() - started


def _compile_threads(threads: int) -> None:
    """In a worker, before torch is imported: Inductor's compile threads (its default is one per
    CPU, in every worker)."""
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", str(threads))


def workers_for(shapes: int, cpus: int | None = None) -> int:
    """Worker processes: one per four CPUs (each compiles with a few threads of its own, and the
    bench keeps one), at most one per shape, at least one."""
    cpus = cpus or os.cpu_count() or 1
    return max(1, min(shapes, cpus // 4))


class Ahead:
    """Compile ``shapes`` ahead in ``workers`` processes (default :func:`workers_for`)."""

    def __init__(self, shapes, workers: int | None = None, task=compile_shape, log=sys.stderr):
        shapes = list(dict.fromkeys((int(N), int(C)) for N, C in shapes))
        if not shapes:
            raise ValueError("shapes must name at least one (N, C)")
        self.log = log
        self.peers = AHEAD  # the peers whose shapes are compiled here
        self.workers = workers or workers_for(len(shapes))
        # a few compile threads per worker: together about the machine's CPUs
        threads = max(1, (os.cpu_count() or 1) // self.workers)
        self.pool = cf.ProcessPoolExecutor(self.workers,
                                           mp_context=multiprocessing.get_context("spawn"),
                                           initializer=_compile_threads, initargs=(threads,))
        self.futures = {shape: self.pool.submit(task, *shape) for shape in shapes}

    def wait(self, N: int, C: int) -> float | None:
        """Block until the worker for N x C is done; its seconds, or None (a shape not asked for, or
        a worker that failed: said in one line on the log, and the bench then compiles it itself
        as it would have)."""
        future = self.futures.get((int(N), int(C)))
        if future is None:
            return None
        try:
            return future.result()
        except Exception as exc:  # the bench compiles the shape itself; only the time is lost
            first = (str(exc).splitlines() or [""])[0][:300]
            print(f"torch.compile ahead at {N}x{C} failed ({type(exc).__name__}: {first}); "
                  f"compiling it in the bench", file=self.log, flush=True)
            return None

    def close(self) -> None:
        """Stop: workers not started are cancelled, running ones finish."""
        self.pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
