"""Lesson 04 (shared memory, v3_smem): counting global atomics, bank conflicts, and the
end-of-lesson questions (rows per warp, the widest row, what the profile calls for)."""
from __future__ import annotations

import dataclasses

import matplotlib
import numpy as np

from ..core import gpu, ladder
from ..course.plots import FIGSIZE, _outside_pyplot
from ..course.verdict import Verdict, call_answer, choice_verdict, failed, passed, read_number
from ..inspection import access
from ..inspection.access import bank_conflict_degree


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


# --- the questions at the end of the lesson
# ------------------------------------------

def check_two_row_warps(answer, N: int = 8192, sms: int = 132) -> Verdict:
    """v3_smem at N rows on a GPU of ``sms`` SMs: how many of the grid's warps take exactly two rows
    in the grid-stride loop (warp w takes rows w, w + W, w + 2W, ... below N; W warps in the
    grid)?"""
    value, verdict = read_number(answer, "with a number of warps (an integer)", whole=True)
    if verdict is not None:
        return verdict
    device, label = _device(sms)
    rung = ladder.get("v3_smem")
    blocks = ladder.plan(rung, N, 1024, device)[0].grid
    W = blocks * (rung.block_size // 32)
    want = max(0, min(W, N - W) - max(0, N - 2 * W))  # w + W < N <= w + 2W
    if value == want:
        return passed(f"{blocks} blocks x {rung.block_size // 32} warps = {W} warps; warps 0 to "
                      f"{N - W - 1} also take row w + {W}: {want} warps take two rows")
    if value == W:
        return failed("that is every warp of the grid; which of them still find a second row "
                      f"below N = {N}?")
    if value == W - want and W > want:
        return failed("that counts the warps that take one row only")
    if value == 2:
        return failed("that is how many rows the busiest warp takes; the question asks how many "
                      "warps take two")
    return failed(f"not {value}: count the grid's warps first (the plan's blocks x "
                  f"{rung.block_size // 32}), then which warp numbers w have w + W < {N}")


def check_widest_c(answer, optin_kib: int = 99) -> Verdict:
    """The widest row (C) that v3_smem can launch on a GPU where one block may opt in to at most
    ``optin_kib`` KiB of shared memory (v3 asks for C * 4 bytes, no static shared memory)."""
    value, verdict = read_number(answer, "with a number of channels (an integer)", whole=True)
    if verdict is not None:
        return verdict
    limit = optin_kib * 1024
    rung = ladder.get("v3_smem")
    want = limit // rung.shared_memory(1, rung.block_size)
    if value == want:
        return passed(f"{want} floats x 4 bytes = {limit} bytes, all that one block may opt in to; "
                      "one channel more and the launch is refused")
    if value == limit:
        return failed("that is the limit in bytes; v3's block holds one float (4 bytes) per "
                      "channel")
    if value == 48 * 1024 // 4:
        return failed("48 KiB is what a block gets without opting in; the launcher opts in, up to "
                      "the limit given")
    if value == optin_kib * 1000 // 4:
        return failed("a KiB is 1024 bytes, not 1000")
    return failed(f"not {value}: how many 4-byte floats fit in {optin_kib} KiB?")


def check_v3_stalls(answer) -> Verdict:
    """The profile of v3 (lesson 13, and this lesson's): DRAM far below its peak, most warp stalls
    on long_scoreboard, none of the top reasons a shared-memory one. Which change does that call
    for?

    a) replace the shared-memory atomics' compare-and-swap loops by plain additions in a fixed
       order;
    b) give each warp more bytes of global loads in flight (wider loads, more loads at once);
    c) launch fewer blocks, so that fewer global atomics (REDG) are issued.
    """
    return choice_verdict(
        answer, "b", why="long_scoreboard is a warp waiting for the data of a global load, with "
                         "DRAM far from busy: more bytes in flight per warp give the memory more "
                         "to do",
        why_not={"a": "a warp stalled in a shared-memory atomic waits on short_scoreboard or "
                      "mio_throttle, and neither is among v3's top reasons; what does "
                      "long_scoreboard wait for?",
                 "c": "the global atomics are a few per block, at its end; fewer blocks also "
                      "mean fewer warps with loads in flight. What does long_scoreboard wait "
                      "for?"})


# --- the kernel exercise: v3's dweight staged in shared memory
# ---------------------------------------

def check_v3_kernel(source: str, sanitize: bool = True) -> Verdict:
    """Lesson 04's kernel exercise: the learner's ``rmsnorm_backward_v3`` (dweight summed per block
    in shared memory), checked as the rung ``yours_v3`` with v3_smem's plan, and timed beside
    v3_smem.
    compute-sanitizer's race check runs by default; ``sanitize=False`` skips it, for speed."""
    from ..course.checking import kernel as kc

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


def bank_conflicts(strides=(1, 2, 32), lanes: int = access.WARP, banks: int = access.BANKS):
    """Shared memory as rows of 32 four-byte banks; the cells one warp touches, coloured by lane.

    Lane ``i`` reads word ``i * stride``. A bank that holds k different touched words serves them
    one after another: a k-way conflict. The title of each panel gives the worst bank's k.
    """
    strides = list(strides)
    fig, axes = _outside_pyplot((FIGSIZE[0], FIGSIZE[1] + 0.3), nrows=1, ncols=len(strides),
                                squeeze=False)
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="#f2f2f2")
    for ax, stride in zip(axes[0], strides):
        rows, bank = access.bank_layout(stride, lanes, banks)
        needed = int(rows.max()) + 1
        shown = max(4, min(needed, 32))
        grid = np.full((shown, banks), np.nan)
        for lane, (r, b) in enumerate(zip(rows, bank)):
            if r < shown:
                grid[r, b] = lane
        degree = access.bank_conflict_degree(stride, lanes, banks)
        ax.pcolormesh(np.arange(banks + 1) - 0.5, np.arange(shown + 1) - 0.5,
                      np.ma.masked_invalid(grid),
                      cmap=cmap, vmin=0, vmax=lanes - 1)
        for y in np.arange(shown + 1) - 0.5:  # row boundaries
            ax.axhline(y, color="white", lw=0.6 if shown <= 8 else 0.2)
        ax.set_xlim(-0.5, banks - 0.5)
        ax.set_ylim(shown - 0.5, -0.5)
        if needed > shown:
            ax.text(banks / 2, shown - 1, f"... {needed - shown} more rows", ha="center",
                    fontsize=7)
        ax.set_xticks([0, 8, 16, 24, 31])
        ax.set_yticks([0, shown - 1])
        ax.tick_params(labelsize=7)
        ax.set_xlabel("bank", fontsize=8)
        kind = "no conflict" if degree == 1 else f"{degree}-way conflict"
        ax.set_title(f"stride {stride}: {kind}", fontsize=9)
    axes[0][0].set_ylabel("row (128 bytes)", fontsize=8)
    fig.suptitle("which bank each lane of a warp hits (colour = lane 0..31)", fontsize=9)
    return fig
