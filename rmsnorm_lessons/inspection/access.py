"""Who touches which byte: the lane, sector, bank and shuffle arithmetic behind the lessons'
pictures.

Plain NumPy, no drawing and no GPU: :mod:`rmsnorm_lessons.course.plots` draws these numbers and
:mod:`rmsnorm_lessons.course.verdict` checks learners' answers against them.

* loads of ``inp`` in v1 (a thread per row) and v2 (a warp per row): :func:`touched_elements`,
  :func:`warp_addresses`, :func:`warp_sectors` (lessons 02 and 03);
* the shuffle butterfly of ``warp_sum``: :func:`butterfly_values`, :func:`butterfly_contents`,
  :func:`butterfly_feeders` (lesson 03);
* shared-memory banks: :func:`bank_layout`, :func:`bank_conflict_degree` (lesson 04);
* ``atomicInc``'s wrap-around (lesson 08) and which chunk of a row each v7 thread loads (lesson 10).
"""
from __future__ import annotations

import numpy as np

WARP = 32  # lanes in a warp
SECTOR = 32  # bytes the memory system moves at once
BANKS = 32  # shared-memory banks, each 4 bytes wide

LAYOUTS = {"thread_per_row": "v1_naive: one thread per row",
           "warp_per_row": "v2_warp: one warp per row"}
_LAYOUT_ALIASES = {"v1_naive": "thread_per_row", "v1": "thread_per_row", "v2_warp": "warp_per_row",
                   "v2": "warp_per_row"}


def layout_name(layout: str) -> str:
    """``"thread_per_row"`` or ``"warp_per_row"`` (also accepts v1_naive, v1, v2_warp, v2)."""
    layout = _LAYOUT_ALIASES.get(layout, layout)
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(LAYOUTS)} (or v1_naive / v2_warp), got "
                         f"{layout!r}")
    return layout


def loop_steps(layout: str, C: int) -> int:
    """How many loop steps cover a row of ``C``: one column a step (v1), 32 columns a step (v2)."""
    return int(C) if layout_name(layout) == "thread_per_row" else -(-int(C) // WARP)


def touched_elements(layout: str, N: int, C: int, step: int = 0):
    """Which element of ``inp[N, C]`` every thread loads at loop step ``step``.

    Returns a list of ``(thread, row, col)``: in ``thread_per_row`` (v1) thread ``t`` owns row ``t``
    and reads column ``step``; in ``warp_per_row`` (v2) warp ``w`` owns row ``w`` and its lane ``l``
    reads column ``step*32 + l``. Threads with no element at this step (past N or C) are left out.
    """
    layout = layout_name(layout)
    found = []
    if layout == "thread_per_row":
        if 0 <= step < C:
            found = [(t, t, step) for t in range(N)]
    else:
        for w in range(N):
            for lane in range(WARP):
                col = step * WARP + lane
                if col < C:
                    found.append((w * WARP + lane, w, col))
    return found


def warp_addresses(layout: str, C: int, step: int = 0, warp: int = 0, itemsize: int = 4):
    """Byte offsets (from the start of ``inp``) that the 32 lanes of ``warp`` load at ``step``."""
    layout = layout_name(layout)
    if layout == "thread_per_row":
        rows = np.arange(warp * WARP, (warp + 1) * WARP)
        cols = np.full(WARP, step)
    else:
        cols = step * WARP + np.arange(WARP)
        rows = np.full(WARP, warp)
        keep = cols < C
        rows, cols = rows[keep], cols[keep]
    return (rows * C + cols) * itemsize


def warp_sectors(layout: str, C: int, step: int = 0, warp: int = 0, itemsize: int = 4,
                 sector: int = SECTOR) -> int:
    """How many distinct ``sector``-byte pieces of memory one warp's load touches at one step.

    The memory system moves whole 32-byte sectors: 32 lanes reading 32 neighbouring floats need 4 of
    them, 32 lanes reading from 32 different rows need 32 (one per lane, unless rows are tiny).
    """
    return int(np.unique(warp_addresses(layout, C, step, warp, itemsize) // sector).size)


def butterfly_values(values, offsets=(16, 8, 4, 2, 1)):
    """Simulate ``value += __shfl_xor_sync(mask, value, offset)`` for each offset on 32 lanes.

    Returns an array of shape ``(len(offsets) + 1, 32)``: row 0 holds the inputs, row k every lane's
    value after step k. With the offsets 16, 8, 4, 2, 1 every lane ends with the sum of all 32.
    """
    v = np.asarray(values, dtype=np.float64).copy()
    if v.shape != (WARP,):
        raise ValueError(f"values must hold one number per lane (32), got shape {v.shape}")
    lanes = np.arange(WARP)
    out = [v.copy()]
    for o in offsets:
        v = v + v[lanes ^ int(o)]
        out.append(v.copy())
    return np.array(out)


def butterfly_contents(offsets=(16, 8, 4, 2, 1)) -> list:
    """Whose inputs each lane's value holds, step by step: one 32 x 32 matrix per step (the inputs
    first), ``m[i, l]`` = how many times lane ``i``'s input is counted in lane ``l``'s value."""
    lanes = np.arange(WARP)
    contains = [np.eye(WARP, dtype=int)]
    for o in offsets:
        m = contains[-1]
        contains.append(m + m[lanes ^ int(o)])
    return contains


def butterfly_feeders(offsets=(16, 8, 4, 2, 1), lane: int = 0) -> np.ndarray:
    """``(len(offsets) + 1, 32)`` booleans: which lanes' values at each step reach ``lane``'s
    result."""
    offsets = tuple(int(o) for o in offsets)
    needed = np.zeros((len(offsets) + 1, WARP), bool)
    needed[-1, lane] = True
    for k in range(len(offsets), 0, -1):
        on = np.flatnonzero(needed[k])
        needed[k - 1, on] = True
        needed[k - 1, on ^ offsets[k - 1]] = True
    return needed


def bank_layout(stride: int, lanes: int = WARP, banks: int = BANKS):
    """(row, bank) of the 4-byte word each lane touches when lane i reads word ``i * stride``."""
    words = np.arange(lanes) * int(stride)
    return words // banks, words % banks


def bank_conflict_degree(stride: int, lanes: int = WARP, banks: int = BANKS) -> int:
    """The worst bank's number of distinct words when lane i reads word ``i * stride``: a k-way
    conflict (1: none). Lanes reading the same word share one access (a broadcast), so they count
    once."""
    rows, bank = bank_layout(stride, lanes, banks)
    per_bank: dict[int, set] = {}
    for r, b in zip(rows, bank):
        per_bank.setdefault(int(b), set()).add(int(r))
    return max(len(v) for v in per_bank.values())


def atomic_inc(old: int, limit: int) -> int:
    """What CUDA's ``atomicInc(address, limit)`` stores (it returns ``old``): 0 once ``old >=
    limit``."""
    return 0 if old >= limit else old + 1


def v7_chunks(C: int, group: int, K: int) -> np.ndarray:
    """Which 16-byte chunk (8 bf16) of a row thread ``t`` of a v7 row group loads as its ``j``-th:
    ``t + j * group``, as a ``(K, group)`` float array with NaN where the row has no such chunk."""
    chunks = C // 8
    grid = np.array([[t + j * group for t in range(group)] for j in range(K)], float)
    grid[grid >= chunks] = np.nan  # lanes with nothing to load in their last chunk
    return grid
