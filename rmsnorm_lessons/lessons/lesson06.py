"""Lesson 06 (128-bit loads, v4): the kernel exercise (v4's 128-bit loads and stores, the bf16 round
trip, the planar staging) and the end-of-lesson questions."""
from __future__ import annotations

import matplotlib
import numpy as np

from ..core import ladder
from ..course.plots import FIGSIZE, _outside_pyplot
from ..course.verdict import Verdict, choice_verdict, failed, passed, read_number

# --- the kernel exercise: v4's 128-bit loads and stores, the bf16 round trip, the planar staging
# ----------

#: staged() left as the interleaved slot (c): right results, an 8-way bank conflict on every shared
#: atomic
INTERLEAVED_SLOT = r"int\s+staged\s*\([^)]*\)\s*\{\s*return\s+c\s*;\s*\}"
#: when dweight alone is wrong: the slots are where to look
SLOT_HINT = ("where dinp is right, look at the staging: staged() must give each channel 0..C-1 a "
             "slot of its own in 0..C-1 (channel 8q + k at k * (C / 8) + q, with C / 8 chunks, not "
             "32), and the last loop reads channel c back from staged(c, C)")


def only_wide_row_accesses(kernel: str):
    """Every LDG of ``kernel`` is 128 bits wide but one 32-bit load (``rstd[row]``), and every STG
    is 128 bits wide: a row tensor read or written narrower anywhere is NOT YET (counting the
    128-bit loads alone lets one narrowed load through the unrolled loops)."""
    from ..course.checking import static as ks

    def test(c):
        ins = c.instructions(kernel)
        narrow_loads = [i.opcode for i in ks._matching(ins, "LDG") if ".128" not in i.opcode]
        narrow_stores = [i.opcode for i in ks._matching(ins, "STG") if ".128" not in i.opcode]
        if len(narrow_loads) <= 1 and not narrow_stores:
            return None
        found = ", ".join(sorted(set(narrow_loads[1:] + narrow_stores)))
        return (f"a row of dout, inp, weight or dinp is read or written narrower than 128 bits "
                f"({len(narrow_loads) - 1 + len(narrow_stores)} x {found} besides rstd's one "
                f"32-bit load): every row access goes through load128 / store128 (Packed128)")

    return ks.Static("no row access narrower than 128 bits (rstd's one 32-bit load aside)", test)


def check_v4_kernel(source: str, sanitize: bool = True) -> Verdict:
    """Lesson 06's kernel exercise: the learner's ``rmsnorm_backward_v4`` and ``add_dweight_v4``
    (bf16 storage, Packed128, channel-planar staging), checked as the rung ``yours_v4`` with
    v4_vec_bf16's plan, and timed beside v4_vec_bf16.
    compute-sanitizer's race check runs by default; ``sanitize=False`` skips it, for speed."""
    from ..course.checking import kernel as kc

    kernel = "rmsnorm_backward_v4"
    return kc.check_kernel(
        source, name="yours_v4", like="v4_vec_bf16", sanitize_it=sanitize,
                           hints={"dweight wrong": SLOT_HINT},
        static=(kc.sass_has("LDG.128", "at least 7 128-bit loads (LDG.E.128) in the main kernel",
                            "load 8 bf16 values at once with load128 / load128cs (Packed128)",
                            kernel=kernel,
                            at_least=7),
                kc.sass_has("STG.128", "a 128-bit store (STG.E.128) of dinp",
                            "store the 8 new dinp values with one 128-bit store (store128cg), not "
                            "one by one",
                            kernel=kernel),
                kc.source_lacks(INTERLEAVED_SLOT, "staged() is not the interleaved slot c",
                                "staged() returns c, the interleaved slot: for one k the 32 lanes "
                                "then hit banks (8 * lane + k) % 32, 4 banks with 8 lanes each, an "
                                "8-way conflict on every shared atomic; return the planar slot of "
                                "channel c = 8q + k, k * (C / 8) + q"),
                only_wide_row_accesses(kernel),
                kc.no_local_memory(kernel)))


# --- the questions at the lesson's end -----------------------------------------------------------

def check_planar_slot(answer, c: int = 19, C: int = 2048) -> Verdict:
    """The shared-memory slot of channel ``c`` in v4's planar staging at this C."""
    value, verdict = read_number(answer, "with a whole number (a slot)", whole=True)
    if verdict is not None:
        return verdict
    q, k = divmod(c, 8)
    want = k * (C // 8) + q
    if value == want:
        return passed(f"channel {c} = 8 * {q} + {k}: chunk q = {q}, element k = {k}, so slot "
                      f"k * (C / 8) + q = {k} * {C // 8} + {q} = {want}")
    if value == c:
        return failed("that is the interleaved slot (channel c at slot c); the planar slot puts "
                      "element k of every chunk into plane k")
    if value == q * (C // 8) + k:
        return failed("q and k are swapped: the plane is chosen by the element k within the chunk, "
                      "the place within the plane by the chunk q")
    return failed(f"not {value}: write c = 8q + k (q the 128-bit chunk, k the place in it), then "
                  "slot = k * (C / 8) + q")


def check_four_wide_conflict(answer) -> Verdict:
    """Had each lane held 4 bf16 channels (64-bit loads) kept at slot c, the k-th add of lane l goes
    to word 4l + k: how many lanes share the busiest bank (the conflict's degree)?"""
    value, verdict = read_number(answer, "with a whole number (lanes per bank)", whole=True)
    if verdict is not None:
        return verdict
    if value == 4:
        return passed("words 4l + k hit banks (4l + k) % 32: 8 banks with 4 lanes each, a 4-way "
                      "conflict: halving the width halves the conflict, but only the planar layout "
                      "removes it")
    if value == 8:
        return failed("8-way is v4's case, 8 channels per lane (words 8l + k); here the words are "
                      "4l + k: count the banks they reach among 32, and the lanes on each")
    if value == 1:
        return failed("the stride between lanes is 4 words, not 1: lanes 0 and 8 are 32 words "
                      "apart, in the same bank")
    return failed(f"not {value}: lane l hits bank (4l + k) % 32; how many different banks do the "
                  "32 lanes reach, and how many lanes land on each?")


def check_streaming_load(answer) -> Verdict:
    """What does replacing ``load128cs`` (``__ldcs``) by ``load128`` change in v4? (a) the values v4
    computes; (b) how the loaded lines are kept in the caches, and possibly the time, not the
    values; (c) the width of the loads in the SASS."""
    return choice_verdict(
        answer, "b", why="__ldcs marks the lines evict-first (LDG.E.EF.128); a hint changes "
                         "caching and ordering, never the loaded values, and only the clock says "
                         "whether it buys time",
        why_not={"a": "a cache hint never changes what a load returns: the same bytes come back "
                      "from wherever the line is",
                 "c": "look at section 4b's SASS lines: with plain loads, what happened to the "
                      "evict-first loads' width?"})


def v4_staging_banks(C: int = 1024, k: int = 0):
    """The banks one shared atomic of v4's loop hits: element ``k`` of every lane's 8 channels,
    staged interleaved (slot c, how v4 first shipped) and planar (slot k * C/8 + q, v4 now). Colour
    = lane; rows are 128 bytes of shared memory counted from the first row touched; each title gives
    the worst bank's number of different words (the conflict degree)."""
    v4 = ladder.v4_vec_bf16
    fig, axes = _outside_pyplot((FIGSIZE[0], FIGSIZE[1] * 0.8), nrows=1, ncols=2, squeeze=False)
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="#f2f2f2")
    banks = v4.BANKS
    layouts = [(True, v4.lane_slots(C, k, interleaved=True)), (False, v4.lane_slots(C, k))]
    # one scale for both
    shown = max(int(s.max() // banks - s.min() // banks) + 1 for _, s in layouts)
    for ax, (interleaved, slots) in zip(axes[0], layouts):
        rows = slots // banks - slots.min() // banks
        grid = np.full((shown, banks), np.nan)
        for lane, (r, b) in enumerate(zip(rows, slots % banks)):
            grid[r, b] = lane
        ax.pcolormesh(np.arange(banks + 1) - 0.5, np.arange(shown + 1) - 0.5,
                      np.ma.masked_invalid(grid),
                      cmap=cmap, vmin=0, vmax=v4.WARP - 1)
        for y in np.arange(shown + 1) - 0.5:
            ax.axhline(y, color="white", lw=0.6)
        ax.set_xlim(-0.5, banks - 0.5)
        ax.set_ylim(shown - 0.5, -0.5)
        ax.set_xticks([0, 8, 16, 24, 31])
        ax.set_yticks(range(shown))
        ax.tick_params(labelsize=7)
        ax.set_xlabel("bank", fontsize=8)
        degree = v4.conflict_degree(C, k, interleaved=interleaved)
        kind = "no conflict" if degree == 1 else f"{degree}-way conflict"
        layout = "interleaved: slot c" if interleaved else "planar: slot k*C/8 + q"
        ax.set_title(f"{layout}\n{kind}", fontsize=9)
    axes[0][0].set_ylabel("row (128 bytes)", fontsize=8)
    fig.suptitle(f"v4's shared atomic for element k = {k} of each lane's 8 channels (C = {C}; "
                 "colour = lane)",
                 fontsize=9)
    return fig
