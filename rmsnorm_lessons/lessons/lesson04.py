"""Lesson 04 (shared memory, v3_smem).

It opens with v2 measured (:func:`opening`: time, Nsight Compute profile and three ablations, no
reading) and the learner's diagnosis of it (:func:`check_diagnosis`). The decision,
:func:`check_dweight_home` on the :func:`outline`: where each block sums its rows' dweight, and
where the barriers stand, with the consequence of each choice computed. The kernel exercise,
:func:`check_v3_kernel` (v3 whole, from its signature); the end-of-lesson questions (rows per warp,
the widest row, the plan's occupancy cap). :func:`bank_conflicts` draws shared memory's banks (the
picture lesson 06's bank conflicts start from).
"""
from __future__ import annotations

import dataclasses

import matplotlib
import numpy as np

from ..core import gpu, ladder
from ..course.plots import FIGSIZE, _outside_pyplot
from ..course.verdict import Verdict, failed, passed, read_number
from ..inspection import access


def _device(sms: int | None):
    """This GPU's facts (the H200's saved facts where there is none) and their label; ``sms`` asks
    "what if the GPU had this many SMs"."""
    device, label = gpu.target_facts_or_fallback()
    if sms is not None:
        device, label = dataclasses.replace(device,
                                            multiprocessors=int(sms)), f"a GPU of {int(sms)} SMs"
    return device, label


# --- the questions at the end of the lesson
# ------------------------------------------

#: the shape the lesson measures: the seed's
N, C = 8192, 1024
#: the causes v3 removes (a diagnosis naming another supported one passes, and is told so)
THIS_LESSON = ("global_atomics",)
#: the lines of kernels/v2_warp.cu the opening takes out in turn, one ablation each
ABLATIONS = {"atomicAdd": "atomicAdd(&dweight[c], norm * dout_row[c]);",
             "dinp": "dinp_row[c] += r * (dnorm - norm * dnorm_norm_mean);",
             "partial": "partial += weight[c] * dout_row[c] * inp_row[c];"}
_OPENINGS: dict = {}


def opening(after: bool = False):
    """The rung before this lesson's, v2_warp, at the seed's shape, with the three ablations of
    :data:`ABLATIONS` as its extra figures, ``"ablation:<label>"``: the % of v2's time gone
    without that line (``after=True``: this lesson's v3_smem, measured as v2 was). On this GPU,
    else the saved run's (:func:`rmsnorm_lessons.course.investigate.opening`; it may lack some
    ablations). Measured once per process, so the diagnosis is judged against the figures the
    opening cell showed."""
    from ..course import investigate

    version = "v3_smem" if after else "v2_warp"
    if version not in _OPENINGS:
        figures = None if after else {f"ablation:{label}": investigate.ablation("v2_warp", line,
                                                                                N, C)
                                      for label, line in ABLATIONS.items()}
        _OPENINGS[version] = investigate.opening(version, N, C, figures=figures)
    return _OPENINGS[version]


def check_diagnosis(bound, cause, metric, value) -> Verdict:
    """The learner's diagnosis of v2's profile and ablations (:func:`opening`): ``bound``,
    ``cause`` (a name of :data:`rmsnorm_lessons.course.diagnose.CAUSES`), ``metric`` (the figure
    that shows it) and ``value`` (that figure as the opening shows it)."""
    from ..course import diagnose

    return diagnose.check(opening(), bound=bound, cause=cause, metric=metric, value=value,
                          this_lesson=THIS_LESSON, rung="v3_smem")


# --- the decision: where each block sums dweight, and where its barriers stand
# ---------------------

#: the block's program in v3, as the decision sees it: (slot number or None, step, depth). Braces
#: close each loop, and a slot stands at the depth of the code around it, so that a slot inside a
#: loop reads as inside it (walk-through 2026-12: slots 4 and 5 printed side by side were a guess)
OUTLINE = (
    (1, None, 0),
    (None, "the block's sums of dweight: C floats, in the memory you choose", 0),
    (None, "each thread zeroes its share of them (c = threadIdx.x, threadIdx.x + blockDim.x, ...)",
     0),
    (2, None, 0),
    (None, "for each of this warp's rows (a grid-stride loop) {", 0),
    (None, "the row's dot product, summed over the warp by the butterfly", 1),
    (None, "for each of the lane's columns {", 1),
    (3, None, 2),
    (None, "add norm * dout into the block's sum of dweight[c]", 2),
    (None, "dinp[row, c] += the row's gradient", 2),
    (None, "}  (end of the column loop)", 1),
    (4, None, 1),
    (None, "}  (end of the row loop: a warp goes on to its next row, or leaves it)", 0),
    (5, None, 0),
    (None, "each thread adds its share of the block's sums into the global dweight (atomicAdd)", 0),
    (6, None, 0),
)
HOMES = ("registers", "shared", "global")
#: the most 32-bit registers one thread may use, on every architecture the course builds for
MAX_REGISTERS = 255
NEEDED = {2: "after the zeroing: without it a warp may add into an entry another thread has not "
             "zeroed yet, and that zero then wipes the sum",
          5: "after the row loop: without it a thread may flush its share of the sums before the "
             "block's last warp has added its rows"}
NOT_HERE = {1: "slot 1 comes before anything: there is nothing yet to wait for",
            3: "slot 3 is inside the column loop: the block's adds need no barrier between them "
               "(an atomic add is whole), and the lanes past the row's end never reach it",
            4: "slot 4 is inside the row loop, at the end of each row: warps take different "
               "numbers of rows, and a __syncthreads() that some threads of the block never reach "
               "hangs or breaks the block",
            6: "slot 6 comes after the last step: nothing follows that could need it"}


def outline() -> None:
    """Print :data:`OUTLINE`: the block's steps in v3 and the numbered slots between them, each
    slot at the depth of the code around it."""
    for slot, step, depth in OUTLINE:
        print("  " + "    " * depth + (f"[{slot}]" if slot is not None else step))


def _consequence(home: str, device, label: str) -> str:
    rung = ladder.get("v3_smem")
    blocks = ladder.plan(rung, N, C, device)[0].grid
    if home == "registers":
        return (f"registers hold a thread's own values: C = {C} floats a thread, "
                f"{C / MAX_REGISTERS:.0f} times the {MAX_REGISTERS} registers a thread may hold "
                f"(the rest spill to local memory), and {rung.block_size} private copies a block "
                "still to add up")
    if home == "global":
        return (f"global memory is v2's choice: N x C = {N * C:,} global atomics, {N:,} on each "
                "address; the ablation above measured what they cost")
    small = ladder.plan(rung, 100, 768, device)[0].grid
    return (f"shared memory: {rung.shared_memory(C, rung.block_size) // 1024} KiB a block at "
            f"C = {C}, on chip, and one global atomic per block and channel: {blocks} x {C} = "
            f"{blocks * C:,} on {label}, {N * C / (blocks * C):.1f}x fewer than v2's {N * C:,} "
            f"(at N = 100, C = 768: {small} x 768 = {small * 768:,} against {100 * 768:,})")


def check_dweight_home(home, barriers) -> Verdict:
    """Lesson 04's decision: ``home``, where each block sums its rows' dweight (``"registers"``,
    ``"shared"`` or ``"global"``); ``barriers``, the slots of :func:`outline` where a
    ``__syncthreads()`` must stand. Says what each choice costs, on this GPU (the H200's saved facts
    where there is none)."""
    if home is None or home is Ellipsis or not isinstance(home, str) or \
            home.strip().lower() not in HOMES:
        return failed(f"home: give one of {', '.join(repr(h) for h in HOMES)}, got {home!r}")
    home = home.strip().lower()
    try:
        slots = {int(s) for s in barriers} if barriers not in (None, Ellipsis) else None
    except (TypeError, ValueError):
        slots = None
    slots_all = {s for s, _, _ in OUTLINE if s is not None}
    if slots is None or not slots <= slots_all:
        return failed(f"barriers: give the slots of the outline where a __syncthreads() stands, a "
                      f"set of numbers among {sorted(slots_all)}, got {barriers!r}")
    device, label = _device(None)
    said = _consequence(home, device, label)
    if home != "shared":
        return failed(f"{said}. Which memory do a block's threads share, on chip?")
    problems = [f"slot {s}: a barrier is needed {NEEDED[s]}" for s in sorted(set(NEEDED) - slots)]
    problems += [NOT_HERE[s] for s in sorted(slots - set(NEEDED))]
    if problems:
        return failed("; ".join(problems))
    return passed(f"{said}. The barriers: {NEEDED[2]}; and {NEEDED[5]}. Registers would hold "
                  f"{C} floats a thread, far past the {MAX_REGISTERS} a thread may hold")


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


def check_v3_occupancy_cap(answer) -> Verdict:
    """The highest achieved occupancy (% of an SM's warp slots) v3's plan allows on this GPU (the
    H200's saved facts where there is none): the plan's blocks per SM x 8 warps over the SM's
    warps."""
    value, verdict = read_number(answer, "with the occupancy in % (a number)")
    if verdict is not None:
        return verdict
    device, label = _device(None)
    rung = ladder.get("v3_smem")
    slots = device.max_threads_per_multiprocessor // 32
    warps = rung.block_size // 32
    per_sm = int(ladder.blocks_per_sm(rung, C, device))  # the plan's, read from the plan
    want = 100.0 * per_sm * warps / slots
    if abs(value - want) <= 0.5:
        return passed(f"{want:.0f} %: the plan puts {per_sm} blocks of {warps} warps on an SM of "
                      f"{slots} warp slots ({label}); achieved occupancy, measured, is what the "
                      "warps fill on average, a little under it")
    if abs(value - 100.0) <= 0.5:
        return failed("100 % would need every warp slot filled: the plan launches a fixed number "
                      "of blocks an SM, not all that fit")
    if abs(value - 100.0 * warps / slots) <= 0.5:
        return failed(f"{value:g} % is one block's warps; how many blocks does the plan put on an "
                      "SM?")
    if abs(value - per_sm * warps) <= 0.5:
        return failed(f"{value:g} is a number of warps; occupancy is a share of the SM's {slots} "
                      "warp slots, in %")
    if want - 5 <= value < want - 0.5:
        return failed("that is near what the profile measured; the cap is the plan's, above what "
                      "the warps achieve on average")
    return failed(f"{value:g} is not it: count the warps the plan puts on one SM, then divide by "
                  "the SM's warp slots (threads per SM / 32)")


# --- the kernel exercise: v3's dweight staged in shared memory
# ---------------------------------------

def check_v3_kernel(source: str, sanitize: bool = True) -> Verdict:
    """Lesson 04's kernel exercise: the learner's ``rmsnorm_backward_v3`` (dweight summed per block
    in shared memory), checked as the rung ``yours_v3`` with v3_smem's plan, and timed beside
    v3_smem; then its accesses on the CPU twin (:mod:`..course.checking.coalescing`): a right v3
    whose lanes each take a block of columns is NOT YET.
    compute-sanitizer's race check runs by default; ``sanitize=False`` skips it, for speed."""
    from ..course.checking import coalescing
    from ..course.checking import kernel as kc

    kernel = "rmsnorm_backward_v3"
    verdict = kc.check_kernel(
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
    return coalescing.judged(verdict, "yours_v3", kernel_name="yours_v3")


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
