"""Every picture of the course, in one module (matplotlib; no GPU needed to draw).

Figures are small on purpose: the notebooks ship with their outputs, so each PNG must stay light.
Functions return the matplotlib Figure; in a notebook it is displayed by being the cell's last value
or by ``plt.show()``.
"""
from __future__ import annotations

import matplotlib

import matplotlib.pyplot as plt
import numpy as np

FIGSIZE = (6.4, 3.2)
DPI = 80
COPY_COLOR = "#d62728"


def _figure(figsize=FIGSIZE):
    fig, ax = plt.subplots(figsize=figsize, dpi=DPI, layout="constrained")
    return fig, ax


def bandwidth_bars(results, copy_gbps: float | None = None, title: str = "bandwidth against the copy line"):
    """Bars of GB/s per version (grouped by shape when several), with the copy bandwidth as a line.

    ``results``: a list of :class:`rmsnorm_lessons.bench.Timing` (or dicts with name, N, C, gbps).
    """
    rows = [r if isinstance(r, dict) else r.as_dict() for r in results]
    names = list(dict.fromkeys(r["name"] for r in rows))
    shapes = list(dict.fromkeys((r["N"], r["C"]) for r in rows))
    copy_gbps = copy_gbps or max((r.get("copy_gbps") or 0) for r in rows) or None
    fig, ax = _figure((max(4.8, 1.1 * len(shapes) * max(1, len(names)) ** 0.5 + 2), 3.2))
    width = 0.8 / max(1, len(names))
    x = np.arange(len(shapes))
    for i, name in enumerate(names):
        vals = [next((r["gbps"] for r in rows if r["name"] == name and (r["N"], r["C"]) == s), np.nan) for s in shapes]
        ax.bar(x + (i - (len(names) - 1) / 2) * width, vals, width, label=name)
    if copy_gbps:
        ax.axhline(copy_gbps, color=COPY_COLOR, ls="--", lw=1.2, label=f"copy {copy_gbps:.0f} GB/s")
    ax.set_xticks(x, [f"{n}x{c}" for n, c in shapes], fontsize=8)
    ax.set_ylabel("GB/s")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, ncol=2)
    return fig


# --- lessons 00-03 (pictures of threads, warps and the butterfly) -----------------------------------


# --- lessons 04-07 (shared memory, bf16, partials, the last block) ---------------------------------
