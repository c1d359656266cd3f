"""Lesson 04 (shared memory, v3_smem): counting global atomics, and bank conflicts."""
from __future__ import annotations

import dataclasses

from .. import gpu, ladder
from ..access import bank_conflict_degree
from . import Verdict, call_answer, failed, passed, read_number


def _device(sms: int | None):
    """This GPU's facts (the H200's saved facts where there is none) and their label; ``sms`` asks
    "what if the GPU had this many SMs"."""
    device, label = gpu.target_facts_or_fallback()
    if sms is not None:
        device, label = dataclasses.replace(device,
                                            multiprocessors=int(sms)), f"a GPU of {int(sms)} SMs"
    return device, label


def check_v3_atomics(answer, N: int = 100, C: int = 768, sms: int | None = None) -> Verdict:
    """How many global atomicAdds does v3_smem issue for one call at (N, C)? On this GPU (the H200's
    saved facts where there is none), or on a GPU of ``sms`` SMs."""
    value, verdict = read_number(answer, "with your count (an integer)", whole=True)
    if verdict is not None:
        return verdict
    device, label = _device(sms)
    rung = ladder.get("v3_smem")
    blocks = ladder.plan(rung, N, C, device)[0].grid
    per_sm = int(ladder.blocks_per_sm(rung, C, device))
    # the plan's grid once the rows are enough for every block
    most = per_sm * device.multiprocessors
    want = blocks * C
    if value == want:
        return passed(f"{blocks} blocks x {C} channels = {want} global atomics on {label} (v2 "
                      f"would issue {N * C})")
    if value == N * C:
        return failed("that is v2's count, one atomic per row and channel; v3 issues one per block "
                      "and channel")
    if value == most * C and most != blocks:
        return failed(f"{most} blocks ({per_sm} per SM x {device.multiprocessors} SMs of {label}) "
                      f"is the plan's upper limit; with {N} rows and {rung.block_size // 32} warps "
                      f"a block, how many blocks does persistent_grid launch?")
    if value == blocks:
        return failed("that is the number of blocks; each block adds all C channels")
    return failed(f"{value} is not it: count the blocks the plan launches on {label}, then the "
                  f"atomics each block issues")


STRIDES = list(range(0, 70)) + [96, 127, 128, 129, 256, 1000, 1024, 1025]


def check_bank_conflict_degree(fn) -> Verdict:
    """``fn(stride)`` -> the worst bank's number of distinct 4-byte words when lane i reads word
    i*stride.

    32 banks, 32 lanes; lanes reading the same word share one access (a broadcast), so they count
    once.
    """
    wrong = []
    for stride in STRIDES:
        got, verdict = call_answer(fn, stride, at=f"at stride {stride}")
        if verdict is not None:
            return verdict
        if got != bank_conflict_degree(stride):
            wrong.append((stride, got, bank_conflict_degree(stride)))
    if not wrong:
        return passed(f"right for all {len(STRIDES)} strides: the degree is gcd(stride, 32), and 1 "
                      "at stride 0")
    stride, got, want = wrong[0]
    hint = ""
    if stride == 0:
        hint = " (all lanes read the same word: that is a broadcast, served at once)"
    elif got == 32 // want:
        hint = " (that looks like the number of banks in use, not the lanes per bank)"
    return failed(f"{len(wrong)} of {len(STRIDES)} strides wrong; e.g. stride {stride}: you said "
                  f"{got}, it is {want}{hint}")


# --- the kernel exercise: v3's dweight staged in shared memory
# ---------------------------------------

def check_v3_kernel(source: str, sanitize: bool = True) -> Verdict:
    """Lesson 04's kernel exercise: the learner's ``rmsnorm_backward_v3`` (dweight summed per block
    in shared memory), checked as the rung ``yours_v3`` with v3_smem's plan, and timed beside
    v3_smem.
    compute-sanitizer's race check runs by default; ``sanitize=False`` skips it, for speed."""
    from . import kernel_check as kc

    kernel = "rmsnorm_backward_v3"
    return kc.check_kernel(
        source, name="yours_v3", like="v3_smem", sanitize_it=sanitize,
        static=(kc.sass_has("BAR", "two barriers (BAR.SYNC): after zeroing, before the global adds",
                            "a __syncthreads is missing: one after zeroing dweight_shared (no warp "
                            "may add before every entry is zero) and one before the block's global "
                            "adds (every warp must have added its rows first)", kernel=kernel,
                            at_least=2),
                kc.sass_has("ATOMS", "a shared-memory atomic (ATOMS) into dweight_shared",
                            "the block's warps add into the same dweight_shared[c]: use atomicAdd "
                            "on the shared array, a plain += loses additions", kernel=kernel),
                kc.sass_has(kc.GLOBAL_ATOMICS, "a global atomic per block and channel (REDG)",
                            "every block adds its sums into the same dweight[c]: use "
                            "atomicAdd(&dweight[c], ...)",
                            kernel=kernel),
                kc.no_local_memory(kernel)))
