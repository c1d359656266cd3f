"""The CPU twin: the course's CUDA C run on the host, with races found for certain (issue 46).

A kernel's text (with ``kernels/common.cuh``) is compiled by g++ against a small runtime
(``runtime/include/cuda_twin.h``: threadIdx and friends, shared memory, ``__syncthreads``, the
shuffles and votes, atomics, fences, the cache-hint loads and stores, ``__nv_bfloat16`` rounding
to nearest even bit for bit) and run in a child process:

* a block's threads are fibers that switch only where a block or a warp must meet (a barrier, a
  shuffle, a vote, ``__syncwarp``); a warp collective completes when every lane of its mask has
  arrived, then the values move (lockstep);
* blocks run one at a time, in an order permuted by a seed (CUDA promises no order between blocks
  and no concurrency, so this is a schedule a GPU may choose; a kernel that waits for another
  block is stopped by the time limit, which names where it waited);
* every load and store is seen (g++'s ``-fsanitize=thread`` instrumentation calls the twin's own
  hooks; libtsan is not used) and checked against shadow memory: an access outside every buffer
  stops the launch and names the line and the index; two accesses by different threads, one a
  plain write, not ordered by a ``__syncthreads`` (same block) or by a fence and an atomic on
  each side (different blocks), are a race, reported with both lines and the element; a barrier
  not every thread reaches, or a shuffle whose lanes do not all arrive, is a divergence;
* what the twin does not model (inline PTX, cp.async, clusters, mbarrier, bulk copies,
  ``__nanosleep``, ...) is refused before anything runs: "needs a GPU: <construct> at line N".

Fibers are ucontext, chosen by measurement (``lab/twin/fiber_switch.sh``, results/twin/NOTES.md):
on the team's 2-core machine a thread-to-thread switch costs 185 ns with ucontext (a system call
each), a boost.context round trip 9.4 ns and a C++20 coroutine's 2.2 ns; but a coroutine can only
suspend in its own body (the course reaches ``__syncthreads`` and the shuffles inside
``__device__`` helpers), and boost.context is a compiled library learners do not have. The
switches are about a third of v6's check (10 million of them, 1.9 s of 5.5 s), less elsewhere,
and every check stays under 10 s on 2 cores. g++ -O1, not -O2: as fast to run, quicker to build.

What the twin cannot judge: speed, and the memory model's weaker orderings beyond what its
happens-before rules name (it runs one interleaving; its verdict on ordering comes from the rules,
not from the hardware). Float results are not bitwise the GPU's (no FMA contraction, IEEE division
where ``--use_fast_math`` approximates), only within the check's rounding bound.

    >>> from rmsnorm_lessons import twin
    >>> ran = twin.run_rung("v3_smem", dout, inp, weight, rstd, dinp, dweight)
    >>> ran.dinp, ran.dweight, ran.hazards
"""
from __future__ import annotations

from .compile import NeedsGPU, TwinCompileError, find_cxx
from .execute import TIME_LIMIT, Hazard
from .plain import KernelRun, run_kernel
from .rungs import RungRun, build_rung, run_rung

__all__ = ["Hazard", "KernelRun", "NeedsGPU", "RungRun", "TIME_LIMIT", "TwinCompileError",
           "available", "build_rung", "find_cxx", "run_kernel", "run_rung"]


def available() -> str | None:
    """None where the twin can run here, else why not (one sentence)."""
    import sys

    if not sys.platform.startswith("linux"):
        return f"the CPU twin runs on Linux only (ucontext fibers, ELF line tables); this is " \
               f"{sys.platform}"
    if find_cxx() is None:
        return "the CPU twin needs g++ (apt install g++)"
    return None
