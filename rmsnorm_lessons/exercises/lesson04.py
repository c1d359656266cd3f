"""Lesson 04 (shared memory, v3_smem): counting global atomics, and bank conflicts."""
from __future__ import annotations

import math

from . import Verdict, call_answer, failed, passed, read_number

H200_SMS = 132  # streaming multiprocessors of an H200


def _v3_blocks(N: int, sms: int, block_size: int = 256, per_sm: int = 4) -> int:
    # kernels._persistent_grid: 4 blocks per SM, never more than the rows need
    warps = block_size // 32
    return max(1, min(sms * per_sm, -(-N // warps)))


def check_v3_atomics(answer, N: int = 100, C: int = 768, sms: int = H200_SMS) -> Verdict:
    """How many global atomicAdds does v3_smem issue for one call at (N, C) on a GPU with ``sms`` SMs?"""
    value, verdict = read_number(answer, "with your count (an integer)", whole=True)
    if verdict is not None:
        return verdict
    blocks = _v3_blocks(N, sms)
    want = blocks * C
    if value == want:
        return passed(f"{blocks} blocks x {C} channels = {want} global atomics (v2 would issue {N * C})")
    if value == N * C:
        return failed("that is v2's count, one atomic per row and channel; v3 issues one per block and channel")
    if value == sms * 4 * C:
        return failed(f"{sms * 4} blocks is the plan's upper limit; with {N} rows and 8 warps a block, "
                      f"how many blocks does _persistent_grid launch?")
    if value == blocks:
        return failed("that is the number of blocks; each block adds all C channels")
    return failed(f"{value} is not it: count the blocks the plan launches, then the atomics each block issues")


def _degree(stride: int) -> int:
    if stride == 0:
        return 1  # every lane reads the same word: one broadcast
    return math.gcd(stride, 32)


STRIDES = list(range(0, 70)) + [96, 127, 128, 129, 256, 1000, 1024, 1025]


def check_bank_conflict_degree(fn) -> Verdict:
    """``fn(stride)`` -> the worst bank's number of distinct 4-byte words when lane i reads word i*stride.

    32 banks, 32 lanes; lanes reading the same word share one access (a broadcast), so they count once.
    """
    wrong = []
    for stride in STRIDES:
        got, verdict = call_answer(fn, stride, at=f"at stride {stride}")
        if verdict is not None:
            return verdict
        if got != _degree(stride):
            wrong.append((stride, got, _degree(stride)))
    if not wrong:
        return passed(f"right for all {len(STRIDES)} strides: the degree is gcd(stride, 32), and 1 at stride 0")
    stride, got, want = wrong[0]
    hint = ""
    if stride == 0:
        hint = " (all lanes read the same word: that is a broadcast, served at once)"
    elif got == 32 // want:
        hint = " (that looks like the number of banks in use, not the lanes per bank)"
    return failed(f"{len(wrong)} of {len(STRIDES)} strides wrong; e.g. stride {stride}: you said {got}, "
                  f"it is {want}{hint}")
