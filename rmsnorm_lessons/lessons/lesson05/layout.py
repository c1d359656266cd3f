"""Lesson 05's decision: what one lane loads at a time in v4 (bf16 values per 128-bit load, the
first channel of a lane at each step of the row loop, and which row widths allow it), checked on
every lane and step, with the consequence drawn: warp 0's loads, coloured by lane, on the sectors
they touch."""
from __future__ import annotations

import matplotlib
import numpy as np

from ...course.plots import FIGSIZE, _outside_pyplot
from ...course.verdict import Verdict, call_answer, failed, passed, read_number

WARP = 32
LOAD_BYTES = 16  # one 128-bit load of a lane
BF16_BYTES = 2
VALUES = LOAD_BYTES // BF16_BYTES  # 8 bf16 values a load
SECTOR = 32  # bytes the memory system moves at once
STEPS = 8  # steps of the row loop the check tries (2048 channels)
WIDTHS = range(1, 4097)  # the row widths c_rule is tried on

_VALUES_WRONG = {
    4: "4 values fill 16 bytes when each is a 4-byte float (v3's fp32); a bf16 value is 2 bytes",
    16: "16 bf16 values are 32 bytes, and the widest load one lane issues moves 16 bytes (128 "
        "bits: LDG.E.128)",
    2: "2 bf16 values are 4 bytes, one 32-bit load as in v3: the point is a 128-bit load",
    1: "one value a load is how v3 moves fp32: a 128-bit load of a lane moves 16 bytes",
}


def first_channels(first_channel, steps: int = STEPS):
    """``(table, None)``: the learner's first channel of every lane (columns) at every step (rows),
    as whole numbers; or ``(None, verdict)`` where the function raised or gave something else."""
    table = np.zeros((steps, WARP), np.int64)
    for step in range(steps):
        for lane in range(WARP):
            got, verdict = call_answer(first_channel, lane, step, at=f"lane={lane}, step={step}")
            if verdict is not None:
                return None, verdict
            if got is Ellipsis:
                return None, failed("replace the ... in first_channel's body with the channel")
            value, verdict = read_number(got, "", whole=True)
            if verdict is not None:
                return None, failed(f"first_channel({lane}, {step}) gave {got!r}: give a channel, "
                                    "a whole number")
            table[step, lane] = value
    return table, None


def _mapping_problem(table) -> str | None:
    """Why the first channels in ``table`` (steps x lanes) are not a coalesced 128-bit mapping, or
    None."""
    steps = table.shape[0]
    v3 = np.arange(WARP)[None, :] + WARP * np.arange(steps)[:, None]
    if np.array_equal(table, v3):
        return ("that is v3's mapping, one float a lane a step: a 128-bit load moves 8 "
                "neighbouring values, so lane l's first channel and the next lane's are 8 apart, "
                "and lanes 0 and 1 here would load 7 channels twice")
    odd = [(s, lane) for s in range(steps) for lane in range(WARP) if table[s, lane] % VALUES]
    if odd:
        s, lane = odd[0]
        return (f"first_channel({lane}, {s}) = {table[s, lane]} is not a multiple of 8: a 128-bit "
                f"load must start on a 16-byte boundary, and channel c starts 2c bytes into a row "
                "that itself starts on one")
    if (table < 0).any():
        return "a channel is never negative: a lane's loads start at channel 0 or after"
    per_step = [np.sort(table[s]) for s in range(steps)]
    taken = np.concatenate(per_step)
    if np.unique(taken).size < taken.size:
        s = next(s for s in range(steps) if np.unique(table[s]).size < WARP
                 or (s and np.intersect1d(table[s], np.concatenate(per_step[:s])).size))
        same_step = np.unique(table[s]).size < WARP
        return (f"at step {s} two lanes load the same 8 channels" if same_step else
                f"at step {s} a lane loads channels some lane already loaded at an earlier step: "
                "the warp covers 32 x 8 = 256 channels a step, so each step moves on by 256")
    for s in range(steps):
        want = VALUES * WARP * s + VALUES * np.arange(WARP)
        if not np.array_equal(per_step[s], want):
            sectors = sector_count(table[s])
            return (f"at step {s} the warp's 32 loads are not side by side (channels "
                    f"{per_step[s][0]}..{per_step[s][-1] + VALUES - 1}, {sectors} sectors of 32 "
                    "B): one warp's load at a step should be 512 neighbouring bytes, 16 sectors, "
                    "steps in order from the start of the row")
    return None


def _c_rule_problem(c_rule) -> Verdict | None:
    wrong = []
    for C in WIDTHS:
        got, verdict = call_answer(c_rule, C, at=f"C={C}")
        if verdict is not None:
            return verdict
        if got is Ellipsis:
            return failed("replace the ... in c_rule's body with a test of C")
        if bool(got) != (C * BF16_BYTES % LOAD_BYTES == 0):
            wrong.append((C, bool(got)))
    if not wrong:
        return None
    accepts = [C for C, got in wrong if got]
    refuses = [C for C, got in wrong if not got]
    if accepts:
        C = accepts[0]
        return failed(f"c_rule({C}) is True, but row 1 of a bf16 tensor of C = {C} starts "
                      f"{C * BF16_BYTES} bytes in, not a multiple of 16: its 128-bit loads would "
                      "be misaligned")
    C = 776 if 776 in refuses else refuses[0]
    return failed(f"c_rule({C}) is False, but every row of C = {C} starts {C * BF16_BYTES} bytes "
                  "after the one before, a multiple of 16, and the row loop's bound (c < C) ends "
                  "each row at its last chunk: the rule needs no more than the rows' alignment")


def check_v4_layout(values_per_load, first_channel, c_rule) -> Verdict:
    """Lesson 05's decision: ``values_per_load`` (bf16 values one lane moves with one 128-bit load),
    ``first_channel(lane, step)`` (the first of those values' channels, for lane 0..31 at step
    0, 1, ... of the row loop) and ``c_rule(C)`` (True for the row widths C such a loop can take),
    tried on every lane, on steps 0..7 and on C = 1..4096."""
    n, verdict = read_number(values_per_load, "of values_per_load with a whole number (bf16 "
                             "values a lane moves with one 128-bit load)", whole=True,
                             name="values_per_load")
    if verdict is not None:
        return verdict
    if n != VALUES:
        return failed(f"values_per_load is not {n}: " + _VALUES_WRONG.get(
            n, "a 128-bit load moves 16 bytes; how many 2-byte bf16 values is that?"))
    for name, fn in (("first_channel", first_channel), ("c_rule", c_rule)):
        if fn is None or fn is Ellipsis:
            return failed(f"replace the ... of {name} with a function (lambda ...: ...)")
        if not callable(fn):
            return failed(f"{name} must be a function (lambda ...: ...), got {fn!r}")
    table, verdict = first_channels(first_channel)
    if verdict is not None:
        return verdict
    problem = _mapping_problem(table)
    if problem is not None:
        return failed(problem)
    verdict = _c_rule_problem(c_rule)
    if verdict is not None:
        return verdict
    return passed("each lane loads 8 neighbouring channels a step and the warp moves on by 256: "
                  "each load is 16 bytes a lane (v3's lane moved 4), warp 0's load at a step "
                  "covers 512 neighbouring bytes, 16 sectors of 32 B (v3's: 128 bytes, 4 "
                  "sectors), and a row of C = 1024 takes 4 steps where v3 took 32. Rows of any C "
                  "with C % 8 == 0 start on 16-byte boundaries (2C bytes a row); v4's launcher "
                  "refuses the others before launching. The picture below draws your mapping.")


def sector_count(firsts) -> int:
    """Distinct 32-byte sectors that loads of 16 bytes at the channels ``firsts`` (of a bf16 row
    that starts on a sector boundary) touch."""
    starts = np.asarray(firsts, np.int64) * BF16_BYTES
    touched = set()
    for s in starts:
        touched.update(range(int(s) // SECTOR, (int(s) + LOAD_BYTES - 1) // SECTOR + 1))
    return len(touched)


def lane_loads(first_channel=None, steps: int = 2):
    """Warp 0's 128-bit loads of one bf16 row at steps 0 .. ``steps - 1`` of the row loop: each
    channel coloured by the lane that loads it, 32-byte sector boundaries marked, the sectors a
    step touches in the title of its row. ``first_channel(lane, step)``: the mapping (default:
    8 lane + 256 step); where it is not written yet, one sentence says so and nothing is drawn."""
    if first_channel is None:
        def first_channel(lane, step):
            return VALUES * lane + VALUES * WARP * step
    table, verdict = first_channels(first_channel, steps) if callable(first_channel) else (
        None, failed("first_channel is not a function yet"))
    if verdict is not None:  # the decision above is not written yet: nothing to draw
        print(f"No picture: {verdict.message}")
        return None
    width = int(max(table.max() + VALUES, VALUES * WARP * steps))
    grid = np.full((steps, width), np.nan)
    for s in range(steps):
        for lane in range(WARP):
            start = int(table[s, lane])
            if 0 <= start and start + VALUES <= width:
                grid[s, start:start + VALUES] = lane
    fig, ax = _outside_pyplot((FIGSIZE[0], 0.9 + 0.45 * steps))
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="#eeeeee")
    mesh = ax.pcolormesh(np.arange(width + 1) - 0.5, np.arange(steps + 1) - 0.5,
                         np.ma.masked_invalid(grid), cmap=cmap, vmin=0, vmax=WARP - 1)
    per_sector = SECTOR // BF16_BYTES
    for c in range(0, width + 1, per_sector):
        ax.axvline(c - 0.5, color="white", lw=0.4)
    ax.set_yticks(range(steps),
                  [f"step {s}: {sector_count(table[s])} sectors" for s in range(steps)])
    ax.set_ylim(steps - 0.5, -0.5)
    ax.set_xlabel("channel of the row (white lines: 32-byte sectors, 16 bf16 each)", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.set_title("warp 0's 128-bit loads of one row, colour = lane (8 bf16 = 16 bytes each)",
                 fontsize=9)
    bar = fig.colorbar(mesh, ax=ax, pad=0.01, fraction=0.04)
    bar.set_label("lane", fontsize=7)
    bar.ax.tick_params(labelsize=6)
    return fig
