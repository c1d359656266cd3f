"""What every figure shares: its size, its resolution, the copy line's colour, and two ways to make
one."""
from __future__ import annotations

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from matplotlib.ticker import MaxNLocator

from ..core import ladder
from ..inspection import access, occupancy

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

    ``results``: a list of :class:`rmsnorm_lessons.speed.bench.Timing` (or dicts with name, N, C,
    gbps).
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


def speed_of_light(results, copy_gbps: float | None = None, target: float = 0.9,
                   title: str = "fraction of the copy bandwidth"):
    """Bars of each row's GB/s as a fraction of the copy bandwidth, per shape, with the copy line
    (1.0) and the target (``target``). ``results``: :class:`rmsnorm_lessons.speed.bench.Timing`
    records or
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


def access_pattern(layout: str = "thread_per_row", rows: int = 32, C: int = 64, step: int = 0,
                   block_size: int = 64, max_cols: int = 96, itemsize: int = 4):
    """The elements of ``inp`` (rows x columns) that the threads load at one step, coloured by lane.

    Thin marks inside each row are the 32-byte sector boundaries; thick horizontal lines separate
    the thread blocks. The title counts the sectors the first warp touches
    (:func:`access.warp_sectors`).
    ``layout``: ``"thread_per_row"`` (v1) or ``"warp_per_row"`` (v2).
    """
    layout = access.layout_name(layout)
    rows, C, block_size = int(rows), int(C), int(block_size)
    if rows < 1 or C < 1:
        raise ValueError(f"rows and C must be at least 1, got rows={rows} C={C}")
    if block_size % access.WARP or not access.WARP <= block_size <= 1024:
        raise ValueError("block_size must be a multiple of 32 between 32 and 1024, got "
                         f"{block_size}")
    steps = access.loop_steps(layout, C)
    step = int(min(max(step, 0), steps - 1))
    touched = access.touched_elements(layout, rows, C, step)

    width = min(C, max_cols)
    cols = [c for _, _, c in touched] or [0]
    first, last = min(cols), max(cols)
    start = 0 if last < width else max(0, min(first - first % 8 - 8, C - width))
    grid = np.full((rows, width), np.nan)
    for thread, r, c in touched:
        if start <= c < start + width:
            grid[r, c - start] = thread % access.WARP

    fig, ax = _outside_pyplot((FIGSIZE[0], min(3.6, 1.2 + 0.07 * rows)))
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="#eeeeee")
    mesh = ax.pcolormesh(np.arange(start, start + width + 1) - 0.5, np.arange(rows + 1) - 0.5,
                         np.ma.masked_invalid(grid), cmap=cmap, vmin=0, vmax=access.WARP - 1,
                         edgecolors="white", linewidth=0.2)
    per_sector = 32 // itemsize
    segments = []
    for r in range(rows):
        for c in range(start, start + width + 1):
            if (r * C + c) % per_sector == 0:
                segments.append([(c - 0.5, r - 0.45), (c - 0.5, r + 0.45)])
    ax.add_collection(LineCollection(segments, colors="#555555", linewidths=0.8))
    rows_per_block = block_size if layout == "thread_per_row" else block_size // access.WARP
    for b in range(rows_per_block, rows, rows_per_block):
        ax.axhline(b - 0.5, color="black", lw=1.5)
    if layout == "thread_per_row":
        for w in range(access.WARP, rows, access.WARP):
            if w % rows_per_block:
                ax.axhline(w - 0.5, color="black", lw=0.6, ls=":")
    ax.set_xlim(start - 0.5, start + width - 0.5)
    ax.set_ylim(rows - 0.5, -0.5)
    shown = f", columns {start}..{start + width - 1} shown" if width < C else ""
    ax.set_xlabel(f"column c (of C={C})" + shown, fontsize=8)
    ax.set_ylabel("row", fontsize=8)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.tick_params(labelsize=7)
    n_sec = access.warp_sectors(layout, C, step, 0, itemsize)
    ax.set_title(f"{access.LAYOUTS[layout]}, loop step {step}: warp 0's load touches {n_sec} "
                 "sector(s) of 32 B\n"
                 f"grey marks: sector boundaries; thick lines: blocks of {block_size} threads",
                 fontsize=8)
    bar = fig.colorbar(mesh, ax=ax, pad=0.01, fraction=0.04)
    bar.set_label("lane", fontsize=7)
    bar.ax.tick_params(labelsize=6)
    return fig


def partials_reduction(rows: int = 12, warps_per_block: int = 2, blocks: int = 3,
                       channels: int = 8):
    """v5's two passes: rows go to blocks (grid-stride), each block writes one row of C partials to
    scratch, then thread c of a second kernel adds column c top to bottom (block 0 first)."""
    colors = matplotlib.colormaps["tab10"]
    fig, ax = _outside_pyplot((FIGSIZE[0], FIGSIZE[1] + 0.4))
    ax.set_xlim(-0.5, 3 * channels + 3.5)
    ax.set_ylim(rows + 1.6, -1.6)
    ax.axis("off")
    block_of = [(r // warps_per_block) % blocks for r in range(rows)]
    # left: the rows of the input, each coloured by the block whose warp handles it
    for r in range(rows):
        ax.add_patch(Rectangle((0, r), channels, 0.85, color=colors(block_of[r]), alpha=0.55, lw=0))
        ax.text(-0.3, r + 0.42, f"row {r}", ha="right", va="center", fontsize=6)
    ax.text(channels / 2, -0.7, f"inp rows (N={rows}) -> block\n({warps_per_block} warps a block, "
            f"grid-stride)", ha="center", fontsize=7)
    # middle: scratch, one row of C partial sums per block
    x0 = channels + 1.5
    top = (rows - blocks) / 2
    for b in range(blocks):
        for c in range(channels):
            ax.add_patch(Rectangle((x0 + c, top + b), 0.9, 0.85, color=colors(b), alpha=0.9, lw=0))
        ax.text(x0 + channels + 0.1, top + b + 0.42, f"block {b}", va="center", fontsize=6)
    ax.text(x0 + channels / 2, top - 0.7, "pass 1: partials[block, c]\n(no atomics)", ha="center",
            fontsize=7)
    ax.annotate("", xy=(x0 - 0.1, top + blocks / 2), xytext=(channels + 0.1, rows / 2),
                arrowprops=dict(arrowstyle="->", lw=1))
    # right: the second kernel, one thread per channel walking down its column
    x1 = x0 + channels + 2.5
    for b in range(blocks):
        for c in range(channels):
            ax.add_patch(Rectangle((x1 + c, top + b), 0.9, 0.85, color=colors(b), alpha=0.35, lw=0))
    for c in range(channels):
        ax.annotate("", xy=(x1 + c + 0.45, top + blocks + 1.0), xytext=(x1 + c + 0.45, top - 0.1),
                    arrowprops=dict(arrowstyle="->", lw=0.8, color="black"))
        ax.add_patch(Rectangle((x1 + c, top + blocks + 1.1), 0.9, 0.85, color="#444444", lw=0))
    ax.text(x1 + channels / 2, top - 0.7, "pass 2: thread c adds\ncolumn c, block 0 first",
            ha="center",
            fontsize=7)
    ax.text(x1 + channels / 2, top + blocks + 2.6, "dweight[c] += sum", ha="center", fontsize=7)
    return fig


def shared_memory_chart(version: str = "v3_smem", block_size: int | None = None,
                        C: int | None = None,
                        arch: str = "sm_90", Cs=None):
    """Dynamic shared memory per block (left) and blocks per SM (right) against C, for one version.

    Computed on the CPU (:func:`rmsnorm_lessons.inspection.occupancy.occupancy`, which compiles the
    kernel once with nvcc; the block and shared memory are what the version's plan launches). Lines:
    the 48 KiB
    a block gets without opting in, the opt-in maximum, the plan's blocks per SM.
    """
    spec = ladder.get(version)
    block = int(block_size or spec.block_size)
    lim = occupancy.limits(arch)
    step = spec.c_multiple if spec.c_multiple > 1 else 1
    if Cs is None:
        Cs = sorted({int(c) // step * step for c in np.geomspace(256, 32768, 49)})
    Cs = np.asarray(Cs)
    smem = np.array([occupancy.launch_shape(spec, int(c), block)[2] for c in Cs]) / 1024
    blocks = np.array([occupancy.occupancy(spec, int(c), arch, block).blocks_per_sm for c in Cs])
    plans = {occupancy.plan_blocks_per_sm(spec, int(c), block) for c in Cs}
    fig, (a1, a2) = _outside_pyplot((FIGSIZE[0], FIGSIZE[1]), nrows=1, ncols=2)
    a1.plot(Cs, smem, color="black", lw=1.3)
    a1.axhline(lim.shared_per_block / 1024, color="#2ca02c", ls="--", lw=1,
               label="48 KiB: no opt-in needed")
    a1.axhline(lim.shared_per_block_optin / 1024, color=COPY_COLOR, ls="--", lw=1,
               label=f"{lim.shared_per_block_optin // 1024} KiB: the most a block may have")
    a1.set_ylabel("KiB per block", fontsize=8)
    a2.step(Cs, blocks, where="post", color="black", lw=1.3, label="blocks that fit on one SM")
    plan = plans.pop() if len(plans) == 1 else None  # a fixed number per SM, the same at every C
    if plan:
        a2.axhline(plan, color="#1f77b4", ls=":", lw=1.2, label=f"the plan launches {plan} per SM")
    a2.set_ylabel("blocks per SM", fontsize=8)
    a2.set_ylim(0, max(int(blocks.max()), plan or 0) + 1)
    a2.yaxis.get_major_locator().set_params(integer=True)
    for ax in (a1, a2):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("C", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.legend(fontsize=6, loc="upper left" if ax is a1 else "upper right")
        if C is not None:
            ax.axvline(C, color="grey", lw=0.8)
    fig.suptitle(f"{spec.name}, {block} threads a block, {arch}", fontsize=9)
    return fig


#: one colour per stall reason, the same in every lesson's picture
STALL_COLORS = {"long_scoreboard": "#1f77b4", "short_scoreboard": "#ff7f0e", "barrier": "#2ca02c",
                "mio_throttle": "#d62728", "lg_throttle": "#9467bd", "wait": "#8c564b",
                "not_selected": "#e377c2", "membar": "#bcbd22", "math_pipe_throttle": "#17becf",
                "drain": "#7f7f7f", "other": "#c7c7c7", "unlisted": "#e5e5e5"}
#: the stall reasons a bar shows one by one; the rest are "other"
STALLS_SHOWN = 4


def _stall_stack(profile) -> list[tuple[str, float]]:
    """(reason, % of stalls) of the top reasons, then "other" (and a saved run's "unlisted")."""
    top = [(r, s) for r, _, s in profile.top_stalls(STALLS_SHOWN)]
    unlisted = profile.stall_share("unlisted") if "unlisted" in profile.stalls else None
    rest = 100.0 - sum(s for _, s in top) - (unlisted or 0.0)
    out = top + ([("other", rest)] if rest > 0.5 else [])
    return out + ([("unlisted", unlisted)] if unlisted else [])


def profile_diff(change):
    """What moved from one rung to the next (:func:`rmsnorm_lessons.course.investigate.
    what_changed`): the bench times against the copy floor (the bytes at the copy bandwidth),
    DRAM % and achieved occupancy against the 60 % line, and the stall reasons' shares."""
    from ..inspection import nsight

    pair = (change.before, change.after)
    names = [o.version for o in pair]
    fig, (a1, a2, a3) = _outside_pyplot((FIGSIZE[0], 2.8), nrows=1, ncols=3)
    for i, o in enumerate(pair):
        t = o.timing
        if t is None:
            a1.text(i, 0, "no time", ha="center", va="bottom", fontsize=7)
            continue
        a1.bar(i, t.ms, 0.6, color="#4c72b0")
        floor = t.bytes / (t.copy_gbps * 1e9) * 1e3 if t.copy_gbps else None
        if floor:
            a1.hlines(floor, i - 0.4, i + 0.4, colors=COPY_COLOR, linestyles="--", lw=1.2,
                      label="bytes at copy speed" if i == 0 else None)
    a1.set_title("bench time, ms", fontsize=8)
    a1.set_ylim(0, a1.get_ylim()[1] * 1.3)  # room for the legend above the bars
    if a1.get_legend_handles_labels()[0]:
        a1.legend(fontsize=5, loc="upper center")
    x = np.arange(2)
    for k, (what, get) in enumerate((("DRAM %", lambda p: p.dram_pct),
                                     ("occupancy %", lambda p: p.occupancy_pct))):
        values = [get(o.profile) for o in pair]
        a2.bar(x + (k - 0.5) * 0.38, [np.nan if v is None else v for v in values], 0.38,
               label=what, color=("#55a868", "#8172b2")[k])
    a2.axhline(nsight.MEMORY_BOUND_PCT, color="grey", ls=":", lw=1,
               label=f"{nsight.MEMORY_BOUND_PCT:.0f} % line")
    a2.set_ylim(0, 130)  # room for the legend above the bars
    a2.set_yticks([0, 20, 40, 60, 80, 100])
    a2.set_title("% of peak / of warp slots", fontsize=8)
    a2.legend(fontsize=5, loc="upper center", ncol=2)
    seen = set()
    for i, o in enumerate(pair):
        bottom = 0.0
        for reason, share in _stall_stack(o.profile):
            a3.bar(i, share, 0.6, bottom=bottom, color=STALL_COLORS.get(reason, "#aaaaaa"),
                   label=None if reason in seen else reason)
            seen.add(reason)
            bottom += share
        if not o.profile.stalls:
            a3.text(i, 0, "no stalls", ha="center", va="bottom", fontsize=7)
    a3.set_ylim(0, 100)
    a3.set_title("warp stalls, % of stalls", fontsize=8)
    if seen:
        a3.legend(fontsize=5, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    for ax in (a1, a2, a3):
        ax.set_xticks(x, names, fontsize=6, rotation=15)
        ax.tick_params(labelsize=6)
    N, C = change.after.shape
    fig.suptitle(f"{names[0]} -> {names[1]} at {N}x{C}", fontsize=8)
    return fig
