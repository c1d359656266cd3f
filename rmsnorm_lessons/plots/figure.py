"""What every figure shares: its size, its resolution, the copy line's colour, and two ways to make
one."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

FIGSIZE = (6.4, 3.2)
DPI = 80
COPY_COLOR = "#d62728"


def _figure(figsize=FIGSIZE):
    fig, ax = plt.subplots(figsize=figsize, dpi=DPI, layout="constrained")
    return fig, ax


def _outside_pyplot(figsize=FIGSIZE, **subplots):
    # a Figure outside pyplot: shown once as a cell's value, never again by the inline backend,
    # and never piling up in pyplot's list of open figures
    fig = Figure(figsize=figsize, dpi=DPI, layout="constrained")
    return fig, fig.subplots(**subplots)


def bandwidth_bars(results, copy_gbps: float | None = None, title: str = "bandwidth against the "
                                                                         "copy line"):
    """Bars of GB/s per version (grouped by shape when several), with the copy bandwidth as a line.

    ``results``: a list of :class:`rmsnorm_lessons.bench.Timing` (or dicts with name, N, C, gbps).
    """
    rows = [r if isinstance(r, dict) else r.as_dict() for r in results]
    names = list(dict.fromkeys(r["name"] for r in rows))
    shapes = list(dict.fromkeys((r["N"], r["C"]) for r in rows))
    copy_gbps = copy_gbps or max((r.get("copy_gbps") or 0) for r in rows) or None
    fig, ax = _figure((min(10.0, max(4.8, 1.0 * len(shapes) + 1.5)), 3.2))
    width = 0.8 / max(1, len(names))
    x = np.arange(len(shapes))
    for i, name in enumerate(names):
        vals = [next((r["gbps"] for r in rows if r["name"] == name and (r["N"], r["C"]) == s),
                     np.nan) for s in shapes]
        ax.bar(x + (i - (len(names) - 1) / 2) * width, vals, width, label=name)
    if copy_gbps:
        ax.axhline(copy_gbps, color=COPY_COLOR, ls="--", lw=1.2, label=f"copy {copy_gbps:.0f} GB/s")
    ax.set_xticks(x, [f"{n}x{c}" for n, c in shapes], fontsize=8)
    ax.set_ylabel("GB/s")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, ncol=2)
    return fig
