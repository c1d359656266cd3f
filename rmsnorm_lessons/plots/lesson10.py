"""Lesson 10 (v7_fast): the row in registers, the copy line and the fixed cost of a launch."""
from __future__ import annotations

import matplotlib
import numpy as np

from .. import access, bench, ladder
from ..ladder import v7_fast
from .figure import COPY_COLOR, FIGSIZE, _outside_pyplot


def v7_row_layout(C: int = 2048, K: int | None = None, block: int = 512):
    """Which thread of a row group loads which 16-byte chunk of a row in v7_fast (chunk = t + j *
    G).

    One column per thread of the group, one row per j (the thread's K chunks): each cell shows the
    chunk number, so a warp's 32 threads read 32 neighbouring chunks (512 contiguous bytes) at every
    j.
    """
    shape = v7_fast.row_layout(C, block, K)
    chunks = C // 8
    G, K = shape.group, shape.K
    grid = access.v7_chunks(C, G, K)
    fig, ax = _outside_pyplot((FIGSIZE[0], 0.9 + 0.35 * K))
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="#eeeeee")
    ax.pcolormesh(np.arange(G + 1) - 0.5, np.arange(K + 1) - 0.5, np.ma.masked_invalid(grid),
                  cmap=cmap,
                  vmin=0, vmax=max(chunks - 1, 1), edgecolors="white", linewidth=0.3)
    if G <= 32:
        for j in range(K):
            for t in range(G):
                if np.isfinite(grid[j, t]):
                    ax.text(t, j, f"{int(grid[j, t])}", ha="center", va="center", fontsize=5,
                            color="white")
    for w in range(32, G, 32):
        ax.axvline(w - 0.5, color="black", lw=1)
    ax.set_xlabel(f"thread t of the row group (G = {G}; black lines: warp boundaries)", fontsize=8)
    ax.set_ylabel("j", fontsize=8)
    ax.set_yticks(range(K))
    ax.invert_yaxis()
    ax.tick_params(labelsize=7)
    idle = int(np.isnan(grid).sum())
    ax.set_title(f"C = {C}: {chunks} chunks of 8 bf16, K = {K} per thread, {shape.groups} row "
                 "group(s) per "
                 f"block" + (f", {idle} idle slots" if idle else ""), fontsize=8)
    return fig


def speed_of_light(results, copy_gbps: float | None = None, target: float = 0.9,
                   title: str = "fraction of the copy bandwidth"):
    """Bars of each row's GB/s as a fraction of the copy bandwidth, per shape, with the copy line
    (1.0) and the target (``target``). ``results``: :class:`rmsnorm_lessons.bench.Timing` records or
    dicts."""
    rows = [r if isinstance(r, dict) else r.as_dict() for r in results]
    if not rows:
        raise ValueError("no results to draw")
    copy_gbps = copy_gbps or max((r.get("copy_gbps") or 0) for r in rows)
    if not copy_gbps:
        raise ValueError("give copy_gbps: the results do not carry it")
    names = list(dict.fromkeys(r["name"] for r in rows))
    shapes = list(dict.fromkeys((r["N"], r["C"]) for r in rows))
    fig, ax = _outside_pyplot((max(4.8, 0.9 * len(shapes) + 2.4), 3.0))
    width = 0.8 / len(names)
    x = np.arange(len(shapes))
    for i, name in enumerate(names):
        vals = [next((r["gbps"] / copy_gbps for r in rows if r["name"] == name and (r["N"],
                r["C"]) == s), np.nan)
                for s in shapes]
        ax.bar(x + (i - (len(names) - 1) / 2) * width, vals, width, label=name)
    ax.axhline(1.0, color=COPY_COLOR, ls="--", lw=1.2, label=f"copy ({copy_gbps:.0f} GB/s)")
    if target:
        ax.axhline(target, color="grey", ls=":", lw=1.2, label=f"{100 * target:.0f} % of copy")
    ax.set_xticks(x, [f"{n}x{c}" for n, c in shapes], fontsize=7, rotation=20)
    ax.set_ylabel("GB/s / copy GB/s", fontsize=8)
    ax.set_ylim(0, 1.15)
    ax.tick_params(labelsize=7)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=6, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.25))
    return fig


def floor_and_fixed(shapes, copy_gbps: float, fixed_us: float = 5.0, overwrite: bool = False):
    """The best fraction of the copy bandwidth a kernel can reach when each launch also pays
    ``fixed_us`` of start-up and finish (ramp, partials, final sum, tail), per shape: floor / (floor
    + fixed)."""
    spec = ladder.get("v7_fast")
    floors = np.array([spec.bytes_moved(N, C, overwrite) / (copy_gbps * 1e9) * 1e6 for N,
                       C in shapes])
    frac = floors / (floors + fixed_us)
    fig, ax = _outside_pyplot((max(4.8, 0.9 * len(shapes) + 2.0), 2.8))
    x = np.arange(len(shapes))
    bars = ax.bar(x, frac, 0.6, color="#1f77b4")
    ax.bar_label(bars, [f"{100 * f:.0f} %\n({t:.0f} us)" for f, t in zip(frac, floors)], fontsize=6)
    ax.axhline(1.0, color=COPY_COLOR, ls="--", lw=1.2)
    ax.axhline(0.9, color="grey", ls=":", lw=1.2)
    ax.set_xticks(x, [f"{n}x{c}" for n, c in shapes], fontsize=7, rotation=20)
    ax.set_ylim(0, 1.25)
    ax.set_ylabel("floor / (floor + fixed)", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.set_title(f"the ceiling with {fixed_us:g} us of fixed cost per launch "
                 f"({'dinp =' if overwrite else 'dinp +='}; floor at {copy_gbps:.0f} GB/s in "
                 "brackets)", fontsize=8)
    return fig


def fixed_cost(lines: dict, C: int | None = None):
    """Time against N at one C, one line per kernel, with its least-squares fit ``fixed + N *
    per_row``.

    ``lines``: {name: [(N, ms), ...]}. Where a line meets N = 0 is what each launch costs whatever
    its size; its slope is the steady-state speed. (:func:`rmsnorm_lessons.bench.fit_fixed_cost`
    does the fit.)
    """
    fig, ax = _outside_pyplot((5.2, 3.0))
    top = max(n for pts in lines.values() for n, _ in pts)
    for i, (name, pts) in enumerate(lines.items()):
        ns, ms = zip(*sorted(pts))
        fixed, per_row = bench.fit_fixed_cost(ns, ms)
        color = f"C{i}"
        ax.plot(np.array(ns) / 1e3, 1e3 * np.array(ms), "o", ms=3.5, color=color)
        ax.plot([0, top / 1e3], [fixed, fixed + per_row * top / 1e3], "-", lw=1.2, color=color,
                label=f"{name}: {fixed:.1f} us + {per_row:.2f} ns/row")
    ax.set_xlim(0, top / 1e3 * 1.05)
    ax.set_ylim(0, None)
    ax.set_xlabel("N (thousands of rows)", fontsize=8)
    ax.set_ylabel("us per launch", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=7, loc="upper left")
    ax.set_title(f"fixed cost and streaming speed{f' at C = {C}' if C else ''}", fontsize=8)
    return fig
