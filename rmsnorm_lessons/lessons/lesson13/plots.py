"""Lesson 13's pictures: the seed's per-warp row loop (synccheck's divergent barrier) and what
Nsight Compute measured."""
from __future__ import annotations

import numpy as np
from matplotlib.patches import Rectangle

from ...core import ladder
from ...course.plots import FIGSIZE, _figure


def seed_loop_rows(N: int = 8200, C: int = 768, version: str = "v6_last_block", device=None):
    """Lesson 13: rows each warp takes in the seed's per-warp loop (row = warp's first, then + warps
    in the grid), per block of ``version``'s plan. A block whose warps take different numbers of
    rows meets a ``__syncthreads`` inside that loop with some of its warps gone: synccheck's
    divergent barrier."""
    launch = ladder.plan(version, N, C, device)[0]
    warps = launch.block // 32
    stride = launch.grid * warps
    first = np.arange(launch.grid)[:, None] * warps + np.arange(warps)[None, :]
    rows = np.where(first < N, (N - 1 - first) // stride + 1, 0)  # rows of warp (block, w)
    uneven = np.flatnonzero(rows.min(axis=1) != rows.max(axis=1))
    fig, ax = _figure((FIGSIZE[0], 2.6))
    shown = np.arange(max(0, launch.grid - 40), launch.grid)
    image = ax.imshow(rows[shown].T, aspect="auto", cmap="viridis", interpolation="nearest",
                      extent=(shown[0] - 0.5, shown[-1] + 0.5, warps - 0.5, -0.5))
    for b in uneven:
        if b in shown:
            ax.add_patch(Rectangle((b - 0.5, -0.5), 1, warps, fill=False, ec="red", lw=1.5))
    fig.colorbar(image, ax=ax, label="rows")
    ax.set_xlabel(f"block (the last {len(shown)} of {launch.grid})")
    ax.set_ylabel("warp")
    ax.set_title(f"{version} with the seed's row loop at N = {N}: {launch.grid} blocks x {warps} "
                 f"warps = {stride} "
                 f"warps\nred: a block whose warps take different numbers of rows ({len(uneven)} "
                 "block(s))",
                 fontsize=8)
    return fig


def profile_bars(profiles, title: str = "what Nsight Compute measured"):
    """Lesson 13: DRAM throughput (% of peak) and achieved occupancy (% of the SM's warps) per
    profiled rung (a list of :class:`rmsnorm_lessons.inspection.nsight.Profile`)."""
    fig, ax = _figure()
    labels = [f"{p.version}\n{p.shape[0]}x{p.shape[1]}" for p in profiles]
    x = np.arange(len(profiles))
    dram = [p.dram_pct or 0.0 for p in profiles]
    occ = [p.occupancy_pct or 0.0 for p in profiles]
    ax.bar(x - 0.2, dram, 0.4, label="DRAM throughput, % of peak")
    ax.bar(x + 0.2, occ, 0.4, label="achieved occupancy, % of warp slots")
    for xi, (d, o) in enumerate(zip(dram, occ)):
        ax.text(xi - 0.2, d + 1, f"{d:.0f}", ha="center", fontsize=8)
        ax.text(xi + 0.2, o + 1, f"{o:.0f}", ha="center", fontsize=8)
    ax.set_xticks(x)
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_ylim(0, 110)
    ax.set_ylabel("%")
    ax.legend(fontsize=8, loc="upper left")
    ax.set_title(title, fontsize=9)
    return fig
