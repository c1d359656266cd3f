"""Lesson 03's decision, made before v2 is written: the butterfly's shuffle offsets and the columns
each lane of a row's warp visits. :func:`check_butterfly` simulates both (no GPU): every lane must
end with the sum of all 32 lanes' numbers, each counted once, and the lanes' columns must cover a
row once, with the warp's 32 loads of each step on 32 neighbouring floats. :func:`design_picture`
draws the consequence of the learner's own answer."""
from __future__ import annotations

import numpy as np

from ...course.plots import FIGSIZE, _outside_pyplot
from ...course.verdict import Verdict, call_answer, failed, passed
from ...inspection import access
from . import plots

WARP = access.WARP
#: the row widths the columns are tried at: the seed's, one no multiple of 32, one under a warp
DESIGN_C = (1024, 1000, 7)
SECTOR = 32  # bytes a sector holds
FLOAT = 4  # bytes a float holds


def read_offsets(offsets):
    """``(tuple of ints, None)`` or ``(None, verdict)`` saying what to give instead."""
    if offsets is None or offsets is Ellipsis:
        return None, failed(f"replace {'None' if offsets is None else 'the ...'} of offsets with "
                            "a tuple of shuffle offsets, in the order the steps use them")
    try:
        got = tuple(offsets)
    except TypeError:
        return None, failed(f"offsets must be a tuple of whole numbers, got {offsets!r}")
    if not all(isinstance(o, (int, np.integer)) and not isinstance(o, bool) for o in got):
        return None, failed(f"offsets must be whole numbers, got {got!r}")
    bad = [int(o) for o in got if not 1 <= o < WARP]
    if bad:
        return None, failed(f"offset {bad[0]} is no lane distance: lane ^ offset must name "
                            f"another lane of the warp, 1 to {WARP - 1}")
    return tuple(int(o) for o in got), None


def offsets_problem(offsets: tuple) -> str | None:
    """None when the butterfly with these offsets leaves every lane with every input once."""
    if not offsets:
        return "no exchange at all: every lane keeps its own number"
    counted = access.butterfly_contents(offsets)[-1]  # [i, l]: lane i's input in lane l's value
    if np.all(counted == 1):
        return None
    if counted.max() > 1:
        again = next((o for k, o in enumerate(offsets) if o in offsets[:k]), None)
        if again is not None:
            return (f"offset {again} comes twice: the second time every lane adds the partner "
                    "whose sum it already holds, so some numbers are counted twice")
        return ("some numbers are counted twice: an offset that is the xor of earlier ones "
                "brings a lane a partner whose inputs it already holds")
    lanes = int(counted[:, 0].sum())
    return (f"after {len(offsets)} step(s) every lane holds the sum of only {lanes} lanes' "
            f"numbers; each exchange doubles the lanes a sum covers: how many steps reach "
            f"{WARP}?")


def columns_table(lane_columns, C: int):
    """``(32 lists of columns, None)`` or ``(None, verdict)`` when the function fails."""
    table = []
    for lane in range(WARP):
        got, verdict = call_answer(lane_columns, lane, C, at=f"lane_columns({lane}, {C})")
        if verdict is not None:
            return None, verdict
        try:
            got = list(got)
        except TypeError:
            return None, failed(f"lane_columns({lane}, {C}) must give the lane's columns (a "
                                f"range or a list), got {got!r}")
        if not all(isinstance(c, (int, np.integer)) and not isinstance(c, bool) for c in got):
            return None, failed(f"lane_columns({lane}, {C}) must give whole column numbers, got "
                                f"{got[:4]!r}")
        table.append([int(c) for c in got])
    return table, None


def columns_problem(table, C: int) -> str | None:
    """None when the lanes' columns cover a row of ``C`` once and each step reads neighbours."""
    seen: dict[int, int] = {}
    for lane, cols in enumerate(table):
        for c in cols:
            if not 0 <= c < C:
                return (f"at C = {C} lane {lane} visits column {c}, outside the row (0 to "
                        f"{C - 1})")
            if c in seen:
                return (f"at C = {C} column {c} is visited by lane {seen[c]} and by lane {lane}: "
                        "its dinp would be updated twice")
            seen[c] = lane
    missing = [c for c in range(C) if c not in seen]
    if missing:
        return (f"at C = {C} no lane visits column {missing[0]}"
                + (f" (nor {len(missing) - 1} more)" if len(missing) > 1 else "")
                + ": when C is no multiple of 32, the last step covers what is left")
    for step in range(max(len(cols) for cols in table)):
        cols = [cols[step] for cols in table if len(cols) > step]
        if max(cols) - min(cols) + 1 != len(cols):
            a, b = (table[0][step], table[1][step]) if len(table[1]) > step else cols[:2]
            return (f"at C = {C}, step {step}: lanes 0 and 1 read columns {a} and {b}, "
                    f"{FLOAT * abs(b - a)} bytes apart, and the warp's load touches "
                    f"{sectors(cols)} sectors; 32 neighbouring floats would touch "
                    f"{-(-len(cols) * FLOAT // SECTOR)}")
    return None


def sectors(cols) -> int:
    """32-byte sectors one warp load of these columns of row 0 touches."""
    return len({c * FLOAT // SECTOR for c in cols})


def check_butterfly(offsets, lane_columns) -> Verdict:
    """Lesson 03's decision: ``offsets``, the ``__shfl_xor_sync`` offsets of the butterfly in the
    order of its steps; ``lane_columns(lane, C)``, the columns of a row that lane ``lane`` of its
    warp visits, in order. Simulated on 32 lanes (no GPU)."""
    got, verdict = read_offsets(offsets)
    if verdict is not None:
        return verdict
    problem = offsets_problem(got)
    if problem is not None:
        return failed(f"offsets {got}: {problem}")
    if lane_columns is None or lane_columns is Ellipsis or not callable(lane_columns):
        return failed("replace lane_columns with a function of (lane, C) giving the columns "
                      "that lane visits, e.g. lane_columns = lambda lane, C: ...")
    for C in DESIGN_C:
        table, verdict = columns_table(lane_columns, C)
        if verdict is not None:
            return verdict
        problem = columns_problem(table, C)
        if problem is not None:
            return failed(problem)
    total = access.butterfly_values(np.arange(WARP), got)[-1]
    table, _ = columns_table(lane_columns, DESIGN_C[0])
    return passed(f"after {len(got)} exchanges every lane holds {total[0]:.0f}, the sum of 0..31, "
                  f"each number counted once. Your columns cover a row once at C = "
                  f"{', '.join(map(str, DESIGN_C))}, and at each step the warp reads 32 "
                  f"neighbouring floats: {sectors([cols[0] for cols in table])} sectors a load "
                  f"at C = {DESIGN_C[0]}, where v1's warp touched "
                  f"{access.warp_sectors('thread_per_row', DESIGN_C[0])}")


def design_picture(offsets, lane_columns, C: int = 64):
    """The consequence of the learner's answers: their butterfly, step by step, above the columns
    their lanes visit in one row of ``C``. Prints why instead where an answer is not given yet."""
    got, verdict = read_offsets(offsets)
    table = None
    if verdict is None and callable(lane_columns):
        table, verdict = columns_table(lane_columns, C)
    elif verdict is None:
        verdict = failed("lane_columns is not a function yet")
    if verdict is not None:
        print(f"Nothing to draw yet: {verdict.message}")
        return None
    fig, (top, bottom) = _outside_pyplot(
        (FIGSIZE[0], 2.3 + 0.55 * (len(got) + 1)), nrows=2,
        gridspec_kw={"height_ratios": [1.0 + 0.55 * (len(got) + 1), 1.3]})
    plots.butterfly(got, ax=top)
    plots.columns_strip(table, C, ax=bottom,
                        sectors_at_step0=sectors([cols[0] for cols in table if cols]))
    return fig
