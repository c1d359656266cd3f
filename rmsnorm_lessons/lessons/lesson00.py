"""Lesson 00: the launch of a one-thread-per-element kernel, and the bytes it moves.

:func:`check_grid`: how many blocks a launch over ``n`` elements in blocks of ``block_size``
threads needs, each thread taking ``per_thread`` elements (4 in ``scale4``).
:func:`check_bytes`: how many bytes ``y[i] = a * x[i]`` (or, with ``accumulate``, ``y[i] += a *
x[i]``) moves through device memory for ``n`` floats.
"""
from __future__ import annotations

import matplotlib
import numpy as np
from matplotlib.patches import Rectangle

from ..course.plots import FIGSIZE, _outside_pyplot
from ..course.verdict import Verdict, choice_verdict, failed, passed, read_number


def check_grid(n: int, block_size: int, grid, per_thread: int = 1) -> Verdict:
    """``grid``: the fewest blocks of ``block_size`` threads that give each of ``n`` elements a
    thread, when each thread takes ``per_thread`` consecutive elements (``n`` a multiple of it)."""
    got, verdict = read_number(grid, "of grid with your answer (a number or an expression)",
                               whole=True)
    if verdict is not None:
        return verdict
    n, block_size, per_thread = int(n), int(block_size), int(per_thread)
    if per_thread < 1 or n % per_thread:
        raise ValueError(f"per_thread must be >= 1 and divide n = {n}, got {per_thread}")
    threads = n // per_thread
    want = -(-threads // block_size)
    if got == want:
        idle = want * block_size - threads
        each = f"{threads} threads of {per_thread} elements; " if per_thread > 1 else ""
        bound = "n" if per_thread == 1 else f"n{per_thread}"  # scale4's thread count is n4
        return passed(f"{each}{want} blocks of {block_size} = {want * block_size} threads; the "
                      f"last {idle} find i >= {bound} and do nothing, which is why the kernel "
                      f"tests `if (i < {bound})`")
    if per_thread > 1 and got == -(-n // block_size):
        return failed(f"{got} blocks give one thread per element, but each thread takes "
                      f"{per_thread} elements: count threads first, n // {per_thread}")
    if got == threads // block_size and threads % block_size:
        t = "n" if per_thread == 1 else f"(n // {per_thread})"
        lost = "elements" if per_thread == 1 else "threads' elements"
        return failed(f"{t} // block_size = {got} rounds down: the last {threads % block_size} "
                      f"{lost} would get no thread. Round up: ({t} + block_size - 1) "
                      f"// block_size")
    if got == threads:
        return failed(f"{got} is one block per thread: each block already has {block_size} "
                      f"threads")
    if got < want:
        return failed(f"{got} blocks give {got * block_size} threads, fewer than the {threads} "
                      f"needed")
    return failed(f"{got} blocks work but are more than needed: {got - want} whole block(s) would "
                  f"do nothing")


def check_bytes(n: int, nbytes, accumulate: bool = False) -> Verdict:
    """``nbytes``: bytes that ``y[i] = a * x[i]`` reads plus writes for ``n`` float32 elements;
    with ``accumulate``, those of ``y[i] += a * x[i]`` (y is read before it is written)."""
    got, verdict = read_number(nbytes, "of nbytes with your answer (a number or an expression)",
                               whole=True)
    if verdict is not None:
        return verdict
    n = int(n)
    want = (12 if accumulate else 8) * n
    if got == want:
        what = "x read, y read and y written" if accumulate else "4 read and 4 written"
        return passed(f"{want:,} bytes: {what}, 4 bytes each per element; "
                      f"bandwidth = bytes / time")
    if accumulate and got == 8 * n:
        return failed("that is y[i] = a * x[i]; += reads y before it writes it: one more array of "
                      "traffic (why the RMSNorm kernels read dinp as well as write it)")
    if got == 4 * n:
        return failed("that counts one array; the kernel reads x and writes y, 4 bytes each per "
                      "element")
    if got in (2 * n, 3 * n):
        return failed("a float32 is 4 bytes, not 1; count every array read or written")
    if got == 12 * n:
        return failed("y is only written (not read first): y[i] = a * x[i], not y[i] += ...")
    if accumulate and got == 16 * n:
        return failed("y is read once and written once, and x read once: three arrays of 4 bytes")
    return failed(f"{got:,} is not right: count the bytes of every array read and written, per "
                  f"element, times n")


# --- the end-of-lesson questions (no cell prints their answers)


def check_ridge(peak_tflops: float, copy_gbps: float, ridge) -> Verdict:
    """``ridge``: the arithmetic intensity (FLOP per byte) where a GPU of ``peak_tflops`` FP32
    TFLOP/s and ``copy_gbps`` GB/s turns from memory-bound to compute-bound."""
    got, verdict = read_number(ridge, "of ridge with your answer (FLOP per byte)")
    if verdict is not None:
        return verdict
    want = peak_tflops * 1e12 / (copy_gbps * 1e9)
    if abs(got - want) <= 0.02 * want:
        return passed(f"{want:.1f} FLOP per byte: a kernel needs that many FLOPs for each byte it "
                      f"moves before the arithmetic, not the memory, sets its time")
    if want and abs(got * want - 1) <= 0.02:
        return failed("that is bytes per FLOP: the ridge is FLOP/s divided by bytes/s")
    if abs(got - want * 1000) <= 0.02 * want * 1000 or abs(got - want / 1000) <= 0.02 * want / 1e3:
        return failed("mind the units: tera is 1e12, giga 1e9")
    return failed("the two roofs meet where bandwidth x intensity = peak FLOP/s: solve for the "
                  "intensity")


def check_more_flops(answer) -> Verdict:
    """The RMSNorm backward with twice the FLOPs per element and the same bytes, on the H200:
    a) takes about twice as long, b) takes about the same time, c) takes about half as long."""
    return choice_verdict(
        answer, "b", why="about the same: twice the intensity is still far left of the ridge, so "
                         "the bytes, not the FLOPs, set the time",
        why_not={"a": "time doubles only where the FLOPs set it; where on the roofline is this "
                      "kernel, and where would twice its intensity put it?",
                 "c": "more work cannot make a kernel faster; compare the time the FLOPs take "
                      "with the time the bytes take"})


def check_rotate_sets(set_bytes: int, l2_bytes: int, sets) -> Verdict:
    """``sets``: how many buffer sets of ``set_bytes`` the course's timing rotates on a GPU whose
    L2 holds ``l2_bytes``, with free memory to spare (the rule of
    :func:`rmsnorm_lessons.speed.timing.sets_for`: together at least three L2s, and at least
    :data:`~rmsnorm_lessons.speed.timing.MIN_SETS`)."""
    from ..speed import timing

    got, verdict = read_number(sets, "of sets with your answer (a number or an expression)",
                               whole=True)
    if verdict is not None:
        return verdict
    set_bytes, l2_bytes = int(set_bytes), int(l2_bytes)
    if set_bytes < 1 or l2_bytes < 1:
        raise ValueError(f"set_bytes and l2_bytes must be positive, got {set_bytes} and "
                         f"{l2_bytes}")
    want = timing.sets_for(set_bytes, l2_bytes, free_bytes=1 << 40)
    three = -(-3 * l2_bytes // set_bytes)  # sets that together hold three L2s, rounded up
    if got == want:
        why = (f"{want} sets of {set_bytes / 2**20:.2f} MiB hold {want * set_bytes / 2**20:.0f} "
               f"MiB, at least three L2s of {l2_bytes / 2**20:.0f} MiB" if want == three else
               f"three L2s need only {three} sets, and the rule asks at least {timing.MIN_SETS}")
        return passed(f"{why}: by the time a set comes round again, two L2s' worth of other "
                      "buffers have passed through the cache")
    if got == -(-l2_bytes // set_bytes) and got != want:
        return failed(f"{got} sets hold one L2's worth: the rule asks for three, so that the "
                      "buffers one launch reads have left L2 before that set is used again")
    if got == timing.MIN_SETS and three > timing.MIN_SETS:
        return failed(f"{timing.MIN_SETS} is the least the rule takes: it applies only when three "
                      f"L2s need fewer sets; here they need more")
    if got == 3 * l2_bytes // set_bytes and got < three:
        return failed(f"{got} sets hold less than three L2s: round up, so that together they "
                      "hold at least three")
    return failed(f"{got} is not it: how many sets of {set_bytes:,} bytes hold three L2s of "
                  f"{l2_bytes:,} bytes (rounded up), and is that at least {timing.MIN_SETS}?")


def thread_indices(n: int = 20, block_size: int = 8):
    """How ``i = blockIdx.x * blockDim.x + threadIdx.x`` numbers the threads of a 1-D launch.

    One box per thread, coloured by block; threads with ``i >= n`` (greyed) exist because the grid
    is rounded up to whole blocks, which is why kernels test ``if (i < n)``.
    """
    n, block_size = int(n), int(block_size)
    if n < 1 or block_size < 1:
        raise ValueError(f"n and block_size must be at least 1, got n={n} block_size={block_size}")
    blocks = -(-n // block_size)
    total = blocks * block_size
    fig, ax = _outside_pyplot((FIGSIZE[0], 1.5))
    cmap = matplotlib.colormaps["Pastel1"]
    for i in range(total):
        b, t = divmod(i, block_size)
        inside = i < n
        ax.add_patch(Rectangle((i, 0), 0.95, 1, color=cmap(b % 9) if inside else "#e0e0e0"))
        ax.text(i + 0.47, 0.72, str(t), ha="center", va="center", fontsize=6)
        ax.text(i + 0.47, 0.28, str(i), ha="center", va="center", fontsize=6, weight="bold",
                color="black" if inside else "#999999")
    for b in range(blocks):
        ax.text(b * block_size + block_size / 2, 1.18, f"blockIdx.x = {b}", ha="center", fontsize=7)
    ax.text(-0.4, 0.72, "threadIdx.x", ha="right", va="center", fontsize=7)
    ax.text(-0.4, 0.28, "i", ha="right", va="center", fontsize=7, weight="bold")
    ax.set_xlim(-6, total + 0.5)
    ax.set_ylim(-0.1, 1.4)
    ax.axis("off")
    ax.set_title(f"n = {n}, blockDim.x = {block_size}: {blocks} blocks, {total - n} idle thread(s) "
                 "(grey)",
                 fontsize=8)
    return fig


def roofline(copy_gbps: float, peak_flops: float, intensity: float,
             name: str = "RMSNorm backward", title: str | None = None):
    """The roofline: attainable FLOP/s against arithmetic intensity (FLOP per byte), log-log.

    The slanted roof is the copy bandwidth (``copy_gbps``, GB/s) times the intensity; the flat one
    is the FP32 peak (``peak_flops``, FLOP/s); they meet at the ridge, ``peak / bandwidth``. A
    kernel of ``intensity`` (``name``) is marked on the lower of the two roofs: left of the ridge,
    memory bounds it.
    """
    if not (copy_gbps > 0 and peak_flops > 0 and intensity > 0):
        raise ValueError("copy_gbps, peak_flops and intensity must be positive, got "
                         f"{copy_gbps}, {peak_flops}, {intensity}")
    bw = copy_gbps * 1e9
    ridge = peak_flops / bw
    x = np.geomspace(min(intensity, ridge) / 10, max(intensity, ridge) * 10, 200)
    fig, ax = _outside_pyplot((4.8, 2.8))
    ax.plot(x, np.minimum(bw * x, peak_flops) / 1e12, color="black", lw=1.5)
    ax.axvline(ridge, color="grey", ls=":", lw=1)
    at = min(bw * intensity, peak_flops) / 1e12
    ax.plot([intensity], [at], "o", color="#d62728")
    ax.annotate(f"{name}\n{intensity:.2f} FLOP/B: {at:.2f} TFLOP/s", (intensity, at),
                textcoords="offset points", xytext=(8, -4), fontsize=7, va="top")
    ax.annotate(f"ridge {ridge:.0f} FLOP/B", (ridge, peak_flops / 1e12), textcoords="offset points",
                xytext=(4, -12), fontsize=7)
    ax.text(x[0], bw * x[0] / 1e12 * 1.6, f"copy {copy_gbps:.0f} GB/s", fontsize=7, rotation=0)
    ax.text(x[-1], peak_flops / 1e12 * 1.15, f"FP32 peak {peak_flops / 1e12:.1f} TFLOP/s",
            fontsize=7, ha="right")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_ylim(bw * x[0] / 1e12 / 2, peak_flops / 1e12 * 3)
    ax.set_xlabel("arithmetic intensity (FLOP per byte)", fontsize=8)
    ax.set_ylabel("TFLOP/s", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.set_title(title or "roofline: the lower roof bounds the kernel", fontsize=9)
    return fig
