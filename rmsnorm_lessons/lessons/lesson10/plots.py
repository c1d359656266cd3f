"""Lesson 10's picture: which thread of a row group loads which 16-byte chunk of a row in v7_fast's
register path."""
from __future__ import annotations

import matplotlib
import numpy as np

from ...core.ladder import v7_fast
from ...course.plots import FIGSIZE, _outside_pyplot
from ...inspection import access


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
