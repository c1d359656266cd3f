"""Lesson 08 (speed of light): the floor time of a shape, and what the partials add to it.

The copy bandwidth and the grid default to this GPU's (measured now, and v7_fast's plan on it); where
there is no GPU, to the H200's saved figures (:func:`rmsnorm_lessons.gpu.copy_bandwidth_or_saved`,
:func:`rmsnorm_lessons.gpu.facts_or_fallback`).
"""
from __future__ import annotations

from .. import gpu, ladder
from . import Verdict, failed, passed, read_number


def bytes_moved(N: int, C: int, overwrite: bool = False, version: str = "v7_fast") -> int:
    """What v7_fast must move (:meth:`rmsnorm_lessons.ladder.Rung.bytes_moved`): dout, inp, (dinp read
    unless overwriting), dinp written; rstd (4 bytes a row); weight read, dweight read and written."""
    return ladder.get(version).bytes_moved(N, C, overwrite)


def floor_us(N: int, C: int, copy_gbps: float, overwrite: bool = False) -> float:
    """The time moving those bytes takes at the copy bandwidth (GB/s = 1e9 bytes per second), in us."""
    return bytes_moved(N, C, overwrite) / (copy_gbps * 1e9) * 1e6


def _close(got: float, want: float, rel: float = 0.01) -> bool:
    return abs(got - want) <= rel * abs(want)


def check_floor_time(answer_us, N: int = 32768, C: int = 1024, copy_gbps: float | None = None,
                     overwrite: bool = False) -> Verdict:
    """``answer_us``: the floor time of one backward call at (N, C) in microseconds (within 1 %), at
    ``copy_gbps`` (default: measured now on this GPU, else the H200's saved figure)."""
    got, verdict = read_number(answer_us, "with a number of microseconds")
    if verdict is not None:
        return verdict
    if copy_gbps is None:
        copy_gbps, _ = gpu.copy_bandwidth_or_saved()
    want = floor_us(N, C, copy_gbps, overwrite)
    if _close(got, want):
        return passed(f"{want:.1f} us: {bytes_moved(N, C, overwrite) / 1e6:.1f} MB at {copy_gbps:.0f} GB/s. "
                      f"No kernel with these semantics runs much faster on this GPU")
    other = floor_us(N, C, copy_gbps, not overwrite)
    # the same count with 4-byte values: what an fp32 rung (v1_naive) moves
    bf16_as_fp32 = bytes_moved(N, C, overwrite, version="v1_naive") / (copy_gbps * 1e9) * 1e6
    for wrong, hint in (
        (other, "you counted the tensors of the other mode: with dinp += the kernel reads dinp too (4 row "
                "tensors), with dinp = it does not (3)"),
        (want * 1e-3, "that is milliseconds: the answer is in microseconds (x 1000)"),
        (want * 1e3, "that is nanoseconds: the answer is in microseconds (/ 1000)"),
        (bf16_as_fp32, "the tensors are bf16: 2 bytes per value, not 4"),
        (want / 2, "count both directions: the copy bandwidth counts bytes read plus bytes written, and so "
                   "must the kernel's bytes (every tensor once, dinp once each way)"),
        (want * 1.073741824, "GB/s here means 1e9 bytes per second, not 2**30"),
        (want / 1.073741824, "GB/s here means 1e9 bytes per second, not 2**30"),
    ):
        if _close(got, wrong, 0.02):
            return failed(f"{got:g} us is not it: {hint}")
    return failed(f"{got:g} us is off by {100 * (got / want - 1):+.0f} %: bytes = (row tensors) * N * C * 2 + "
                  f"4 * N + 3 * C * 2, time = bytes / (GB/s * 1e9)")


def partials_fraction(N: int, C: int, grid: int) -> float:
    """Extra traffic of the partials (written once, read once, fp32) over the accumulate-mode bytes."""
    return 2 * grid * C * 4 / bytes_moved(N, C)


def check_partials_fraction(answer, N: int = 4096, C: int = 16384, grid: int | None = None) -> Verdict:
    """``answer``: the partials' traffic as a fraction of the kernel's bytes (e.g. 0.05 for 5 %), for a grid
    of ``grid`` blocks (default: what v7_fast's plan launches at (N, C) on this GPU, else on the H200)."""
    got, verdict = read_number(answer, "with a fraction, e.g. 0.05 for 5 %")
    if verdict is not None:
        return verdict
    if grid is None:
        device, _ = gpu.facts_or_fallback()
        grid = ladder.plan("v7_fast", N, C, device)[0].grid
    want = partials_fraction(N, C, grid)
    if _close(got, want, 0.03):
        return passed(f"{100 * want:.2f} %: {grid} blocks x {C} floats, written and read back, against "
                      f"{bytes_moved(N, C) / 1e6:.0f} MB. It grows as grid / N: fewer rows per block, more "
                      f"partials per row")
    if _close(got, 100 * want, 0.03):
        return failed("that is a percentage: give the fraction (divide by 100)")
    if _close(got, want / 2, 0.03):
        return failed("half of it: the partials are fp32 (4 bytes each) and move twice, written by every "
                      "block and read back by the final sum")
    if _close(got, 2 * want, 0.03):
        return failed("twice too much: the partials move once each way, and the kernel's row tensors are "
                      "bf16 (2 bytes a value)")
    return failed(f"{got:g} is off: partial bytes = 2 * grid * C * 4; the kernel's bytes = 4 * N * C * 2 + "
                  f"4 * N + 3 * C * 2")
