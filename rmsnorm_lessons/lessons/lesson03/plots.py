"""Lesson 03's pictures: the shuffle butterfly, a warp's columns of one row, the speedup
bars."""
from __future__ import annotations

import matplotlib
import numpy as np
from matplotlib.collections import LineCollection

from ...course.plots import FIGSIZE, _outside_pyplot
from ...inspection import access


def butterfly(offsets=(16, 8, 4, 2, 1), highlight: int | None = 0, ax=None):
    """The shuffle butterfly: 32 lanes (x) by steps (y, top to bottom), one line per value received.

    At a step with offset ``o`` lane ``i`` receives the value of lane ``i ^ o`` and adds it to its
    own. Lanes of one colour hold the same partial sum; the label at the right says how many lanes'
    inputs that sum contains. ``highlight`` draws in black the lines that feed lane ``highlight``'s
    result. ``ax``: draw there (a panel of a larger figure) instead of on a figure of its own.
    """
    offsets = tuple(int(o) for o in offsets)
    if ax is None:
        fig, ax = _outside_pyplot((FIGSIZE[0], 1.0 + 0.55 * (len(offsets) + 1)))
    else:
        fig = ax.figure
    lanes = np.arange(access.WARP)
    # which inputs each lane's value holds, step by step
    contains = access.butterfly_contents(offsets)
    needed = (access.butterfly_feeders(offsets, highlight) if highlight is not None
              # lanes whose value reaches the highlight
              else np.zeros((len(offsets) + 1, access.WARP), bool))
    faint, strong = [], []
    for k, o in enumerate(offsets, start=1):
        for i in lanes:
            on = highlight is not None and needed[k, i]
            (strong if on else faint).append([(i ^ o, k - 1), (i, k)])  # the value received
            if on:
                strong.append([(i, k - 1), (i, k)])  # the lane's own value, kept
        ax.text(access.WARP - 0.2, k - 0.5, f"xor {o}", fontsize=7, va="center", color="#08519c")
    # plain (not antialiased) faint lines keep the PNG small
    ax.add_collection(LineCollection(faint, colors="#9ecae1", linewidths=0.6, antialiaseds=False,
                                     zorder=1))
    ax.add_collection(LineCollection(strong, colors="black", linewidths=1.1, zorder=2))
    cmap = matplotlib.colormaps["tab20"]
    for k, m in enumerate(contains):
        groups = {}
        colour_of = [groups.setdefault(tuple(m[:, i]), len(groups)) for i in lanes]
        ax.scatter(lanes, np.full(access.WARP, k), c=[cmap(g % 20) for g in colour_of], s=18,
                   zorder=3,
                   edgecolors="black", linewidths=0.3)
        counts = sorted({int(m[:, i].sum()) for i in lanes})
        label = "/".join(str(c) for c in counts)
        ax.text(access.WARP + 2.6, k, f"{label} lane{'s' if counts != [1] else ''}", fontsize=7,
                va="center")
    ax.set_yticks(range(len(offsets) + 1), ["input"] + [f"step {k}" for k in range(1,
            len(offsets) + 1)],
                  fontsize=7)
    ax.set_xticks(range(0, access.WARP, 4))
    ax.tick_params(axis="x", labelsize=7)
    ax.set_xlim(-0.8, access.WARP + 6.5)
    ax.set_ylim(len(offsets) + 0.4, -0.4)
    ax.set_xlabel("lane", fontsize=8)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    title = ("__shfl_xor_sync butterfly: offsets " + ", ".join(map(str, offsets)) if offsets
             else "the 32 lanes' inputs, before any exchange")
    if highlight is not None:
        title += f" (black: what reaches lane {highlight})"
    ax.set_title(title, fontsize=9)
    return fig


def speedup_bars(results, baseline: str = "v1_naive", title: str | None = None):
    """Bars of the speedup of each version over ``baseline`` at each shape (time ratio).

    ``results``: :class:`rmsnorm_lessons.speed.bench.Timing` records or dicts with name, N, C, ms.
    """
    rows = [r if isinstance(r, dict) else r.as_dict() for r in results]
    base = {(r["N"], r["C"]): r["ms"] for r in rows if r["name"] == baseline}
    if not base:
        raise ValueError(f"no result of the baseline {baseline!r} among the results")
    names = list(dict.fromkeys(r["name"] for r in rows))
    shapes = [s for s in dict.fromkeys((r["N"], r["C"]) for r in rows) if s in base]
    fig, ax = _outside_pyplot((max(3.6, 1.0 + 1.2 * len(shapes)), 2.8))
    width = 0.8 / len(names)
    x = np.arange(len(shapes))
    for i, name in enumerate(names):
        vals = [next((base[s] / r["ms"] for r in rows if r["name"] == name and (r["N"],
                r["C"]) == s), np.nan)
                for s in shapes]
        bars = ax.bar(x + (i - (len(names) - 1) / 2) * width, vals, width, label=name)
        ax.bar_label(bars, [f"{v:.1f}x" if np.isfinite(v) else "" for v in vals], fontsize=7)
    ax.set_xticks(x, [f"{n}x{c}" for n, c in shapes], fontsize=8)
    ax.set_ylabel(f"speedup over {baseline}", fontsize=8)
    ax.set_yscale("log")
    ax.margins(y=0.25)
    ax.set_title(title or f"time of {baseline} / time of each version", fontsize=9)
    ax.legend(fontsize=7)
    return fig


def columns_strip(columns, C: int, ax=None, sectors_at_step0: int | None = None):
    """One row of ``C`` floats (the first 128 drawn), each coloured by the lane that visits it and
    numbered with the step at which it does; grey marks are the 32-byte sector boundaries.
    ``columns``: for each of the 32 lanes, the columns it visits, in order."""
    shown = min(int(C), 128)
    lane_of = np.full(shown, np.nan)
    step_of = np.full(shown, -1)
    for lane, cols in enumerate(columns):
        for step, c in enumerate(cols):
            if 0 <= c < shown:
                lane_of[c], step_of[c] = lane, step
    if ax is None:
        fig, ax = _outside_pyplot((FIGSIZE[0], 1.3))
    else:
        fig = ax.figure
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="#eeeeee")
    ax.pcolormesh(np.arange(shown + 1) - 0.5, [-0.5, 0.5], lane_of[None, :], cmap=cmap, vmin=0,
                  vmax=access.WARP - 1, edgecolors="white", linewidth=0.2)
    for c in range(shown):
        if step_of[c] >= 0 and shown <= 64:
            ax.text(c, 0, str(step_of[c]), ha="center", va="center", fontsize=5, color="white")
    ax.vlines(np.arange(0, shown + 1, 8) - 0.5, -0.5, 0.5, colors="#555555", linewidths=0.8)
    ax.set_yticks([])
    ax.set_xlim(-0.5, shown - 0.5)
    ax.tick_params(axis="x", labelsize=7)
    ax.set_xlabel(f"column of one row (C = {C}{', the first 128 drawn' if C > 128 else ''}); "
                  "colour: lane, number: step", fontsize=7)
    at = "" if sectors_at_step0 is None else f": step 0 touches {sectors_at_step0} sectors"
    ax.set_title(f"your lane_columns{at}", fontsize=9)
    return fig
