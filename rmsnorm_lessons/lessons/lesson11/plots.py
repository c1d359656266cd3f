"""Lesson 11's pictures: the fixed cost of a launch beside the floor of each shape, and a fit of
time against N that splits a launch into fixed cost and streaming speed."""
from __future__ import annotations

import numpy as np

from ...core import ladder
from ...course.plots import COPY_COLOR, _outside_pyplot
from ...speed import bench


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
    its size; its slope is the steady-state speed.
    (:func:`rmsnorm_lessons.speed.bench.fit_fixed_cost` does the fit.)
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
