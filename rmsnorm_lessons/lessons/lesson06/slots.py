"""Lesson 06's decision and its questions on banks: where channel c of a block's dweight lives in
shared memory (:func:`check_slot`, a learner's ``slot(c, C)`` tried on every channel and every
shared atomic of the loop), the picture of the banks one shared atomic hits under any slot
(:func:`v4_staging_banks`), and the questions on the planar slot and a four-wide conflict."""
from __future__ import annotations

import matplotlib
import numpy as np

from ...core import ladder
from ...course.plots import FIGSIZE, _outside_pyplot
from ...course.verdict import Verdict, call_answer, failed, passed, read_number

VEC, WARP, BANKS = 8, 32, 32  # bf16 channels a lane's chunk, lanes, 4-byte banks
#: the row widths the decision is tried on: the smallest, one whose last step is partial, the
#: seed's, the lesson's, a wide one
WIDTHS = (8, 776, 1024, 2048, 16384)


def interleaved(c, C):
    """Slot c: where v3 kept channel c, and where v4's first draft keeps it."""
    return c


def planar(c, C):
    """Ours: channel 8q + k in plane k, at k * (C / 8) + q (:func:`ladder.v4_vec_bf16.staged`)."""
    return int(ladder.v4_vec_bf16.staged(c, C))


def slots_of(slot, C: int):
    """``(array, None)``: ``slot(c, C)`` for c = 0 .. C - 1 as whole numbers; or ``(None,
    verdict)``."""
    out = np.empty(C, np.int64)
    for c in range(C):
        got, verdict = call_answer(slot, c, C, at=f"c={c}, C={C}")
        if verdict is not None:
            return None, verdict
        value, verdict = read_number(got, "", whole=True)
        if verdict is not None:
            return None, failed(f"slot({c}, {C}) gave {got!r}: give a slot, a whole number")
        out[c] = value
    return out, None


def worst_conflict(slots, C: int):
    """``(degree, step, k, banks)`` of the worst shared atomic of v4's loop with these slots: lane l
    at step s holds chunk q = l + 32 s and adds its k-th channel 8q + k into ``slots[8q + k]``; a
    bank serving d different words at once is a d-way conflict (1: none)."""
    worst = (0, 0, 0, 0)
    for step in range(-(-C // (VEC * WARP))):
        chunks = np.arange(WARP) + WARP * step
        chunks = chunks[chunks < C // VEC]
        for k in range(VEC):
            words = slots[VEC * chunks + k]
            banks = words % BANKS
            degree = max(np.unique(words[banks == b]).size for b in np.unique(banks))
            if degree > worst[0]:
                worst = (degree, step, k, np.unique(banks).size)
    return worst


def check_slot(slot) -> Verdict:
    """Lesson 06's decision: ``slot(c, C)``, the 4-byte word of the block's shared dweight that
    channel c lives in, for a row of C channels (C % 8 == 0). Right when, at every C tried
    (:data:`WIDTHS`), it gives each channel its own slot among 0 .. C - 1 and every shared atomic of
    v4's loop (element k of each lane's 8 channels, at every step) reaches 32 banks."""
    if slot is None or slot is Ellipsis:
        return failed("replace the ... of slot's body: return the slot of channel c")
    if not callable(slot):
        return failed(f"slot must be a function of (c, C), got {slot!r}")
    for C in WIDTHS:
        slots, verdict = slots_of(slot, C)
        if verdict is not None:
            return verdict
        outside = np.flatnonzero((slots < 0) | (slots >= C))
        values, counts = np.unique(slots, return_counts=True)
        if outside.size or values.size < C:
            fits = _fits_one_width(slot)
            if fits is not None:
                return failed(f"your slot gives every channel its own slot at C = {fits} only (at "
                              f"C = {C} it does not): the length of a plane must follow C, C / 8 "
                              "chunks, not a fixed number")
        if outside.size:
            c = int(outside[0])
            return failed(f"slot({c}, {C}) = {slots[c]} is outside 0 .. {C - 1}: the block's "
                          f"shared dweight holds C = {C} floats")
        if values.size < C:
            shared = int(values[np.flatnonzero(counts > 1)[0]])
            c1, c2 = np.flatnonzero(slots == shared)[:2]
            return failed(f"channels {c1} and {c2} share slot {shared} at C = {C}: two channels "
                          "in one word add into each other's sums. Each channel needs a slot of "
                          "its own")
        degree, step, k, banks = worst_conflict(slots, C)
        if degree > 1:
            same = (" (slot c: v3's layout and your draft's)"
                    if np.array_equal(slots, np.arange(C)) else "")
            return failed(f"a permutation, but at C = {C}, step {step}, element k = {k} the 32 "
                          f"lanes' adds reach {banks} banks: {_an(degree)}-way conflict{same}. "
                          "Lane l adds channel 8q + k of chunk q = l + 32 step: which slots put "
                          "32 such channels, one per lane, in 32 different banks?")
    ours = " (ours, the planar slot, is one such permutation)" if not _is_planar(slot) else ""
    return passed(f"at C = {', '.join(map(str, WIDTHS))} each channel has its own slot, and every "
                  "shared atomic of the loop (element k of each lane's 8 channels, at every step) "
                  f"reaches 32 banks: no conflict, where slot c gives an 8-way one{ours}. The "
                  "picture below draws one of them both ways")


def _an(n: int) -> str:
    return f"an {n}" if str(n).startswith("8") or n in (11, 18) else f"a {n}"


def _fits_one_width(slot):
    """The C among 8 .. 4096 (multiples of 8) at which ``slot`` is a permutation, if it is one at
    exactly one of them tried (the planes' length fixed to one C)."""
    good = []
    for C in (256, 8, 512, 1024, 2048, 4096):
        slots, verdict = slots_of(slot, C)
        if verdict is None and np.array_equal(np.sort(slots), np.arange(C)):
            good.append(C)
    return good[0] if len(good) == 1 else None


def _is_planar(slot) -> bool:
    slots, verdict = slots_of(slot, 1024)
    return verdict is None and np.array_equal(slots, ladder.v4_vec_bf16.staged(np.arange(1024),
                                                                               1024))


def v4_staging_banks(C: int = 1024, k: int = 0, slots=("interleaved", "planar"), step: int = 0):
    """The banks one shared atomic of v4's loop hits: element ``k`` of every lane's 8 channels at
    ``step``, one panel per entry of ``slots``: ``"interleaved"`` (slot c, v4's first draft),
    ``"planar"`` (ours) or a learner's ``slot(c, C)`` (not written yet: one sentence says so, and
    nothing is drawn). Colour = lane; rows are 128 bytes of shared
    memory counted from the first row touched; each title gives the worst bank's number of
    different words (the conflict degree)."""
    named = {"interleaved": (interleaved, "interleaved: slot c"),
             "planar": (planar, "planar: slot k*C/8 + q")}
    panels = []
    for s in slots:
        fn, label = named[s] if isinstance(s, str) else (s, "your slot")
        chunks = np.arange(WARP) + WARP * step
        chunks = chunks[chunks < C // VEC]
        try:
            words = np.array([int(fn(int(c), C)) for c in VEC * chunks + k])
        except Exception as exc:  # a slot not written yet (or one that raises): nothing to draw
            print(f"No picture: slot(c, C) gave no slot ({type(exc).__name__}): write it first")
            return None
        panels.append((label, words))
    fig, axes = _outside_pyplot((FIGSIZE[0] * (0.55 if len(panels) == 1 else 1), FIGSIZE[1] * 0.8),
                                nrows=1, ncols=len(panels), squeeze=False)
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="#f2f2f2")
    shown = max(int(w.max() // BANKS - w.min() // BANKS) + 1 for _, w in panels)
    for ax, (label, words) in zip(axes[0], panels):
        rows = words // BANKS - words.min() // BANKS
        grid = np.full((shown, BANKS), np.nan)
        for lane, (r, b) in enumerate(zip(rows, words % BANKS)):
            grid[r, b] = lane
        ax.pcolormesh(np.arange(BANKS + 1) - 0.5, np.arange(shown + 1) - 0.5,
                      np.ma.masked_invalid(grid), cmap=cmap, vmin=0, vmax=WARP - 1)
        for y in np.arange(shown + 1) - 0.5:
            ax.axhline(y, color="white", lw=0.6)
        ax.set_xlim(-0.5, BANKS - 0.5)
        ax.set_ylim(shown - 0.5, -0.5)
        ax.set_xticks([0, 8, 16, 24, 31])
        ax.set_yticks(range(shown))
        ax.tick_params(labelsize=7)
        ax.set_xlabel("bank", fontsize=8)
        degree = max(np.unique(words[words % BANKS == b]).size for b in np.unique(words % BANKS))
        kind = "no conflict" if degree == 1 else f"{degree}-way conflict"
        ax.set_title(f"{label}\n{kind}", fontsize=9)
    axes[0][0].set_ylabel("row (128 bytes)", fontsize=8)
    fig.suptitle(f"v4's shared atomic for element k = {k} of each lane's 8 channels (C = {C}; "
                 "colour = lane)", fontsize=9)
    return fig


# --- the questions on banks ----------------------------------------------------------------------

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
