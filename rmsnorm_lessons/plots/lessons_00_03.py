"""Lessons 00-03: pictures of threads, warps, coalescing and the butterfly; the check's and the
speedups' charts."""
from __future__ import annotations

import matplotlib
import numpy as np
from matplotlib.collections import LineCollection
from matplotlib.patches import Rectangle
from matplotlib.ticker import MaxNLocator

from .. import access
from .figure import FIGSIZE, _outside_pyplot


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


def butterfly(offsets=(16, 8, 4, 2, 1), highlight: int | None = 0):
    """The shuffle butterfly: 32 lanes (x) by steps (y, top to bottom), one line per value received.

    At a step with offset ``o`` lane ``i`` receives the value of lane ``i ^ o`` and adds it to its
    own. Lanes of one colour hold the same partial sum; the label at the right says how many lanes'
    inputs that sum contains. ``highlight`` draws in black the lines that feed lane ``highlight``'s
    result.
    """
    offsets = tuple(int(o) for o in offsets)
    fig, ax = _outside_pyplot((FIGSIZE[0], 1.0 + 0.55 * (len(offsets) + 1)))
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
    title = "__shfl_xor_sync butterfly: offsets " + ", ".join(map(str, offsets))
    if highlight is not None:
        title += f" (black: what reaches lane {highlight})"
    ax.set_title(title, fontsize=9)
    return fig


def thread_indices(n: int = 20, block_size: int = 8):
    """How ``i = blockIdx.x * blockDim.x + threadIdx.x`` numbers the threads of a 1-D launch.

    One box per thread, coloured by block; threads with ``i >= n`` (greyed) exist because the grid
    is rounded up to whole blocks, which is why kernels test ``if (i < n)``.
    """
    n, block_size = int(n), int(block_size)
    if n < 1 or block_size < 1:
        raise ValueError(f"n and block_size must be at least 1, got n={n} block_size={block_size}")
    blocks = -(-n // block_size)
    total = blocks * block_size
    fig, ax = _outside_pyplot((FIGSIZE[0], 1.5))
    cmap = matplotlib.colormaps["Pastel1"]
    for i in range(total):
        b, t = divmod(i, block_size)
        inside = i < n
        ax.add_patch(Rectangle((i, 0), 0.95, 1, color=cmap(b % 9) if inside else "#e0e0e0"))
        ax.text(i + 0.47, 0.72, str(t), ha="center", va="center", fontsize=6)
        ax.text(i + 0.47, 0.28, str(i), ha="center", va="center", fontsize=6, weight="bold",
                color="black" if inside else "#999999")
    for b in range(blocks):
        ax.text(b * block_size + block_size / 2, 1.18, f"blockIdx.x = {b}", ha="center", fontsize=7)
    ax.text(-0.4, 0.72, "threadIdx.x", ha="right", va="center", fontsize=7)
    ax.text(-0.4, 0.28, "i", ha="right", va="center", fontsize=7, weight="bold")
    ax.set_xlim(-6, total + 0.5)
    ax.set_ylim(-0.1, 1.4)
    ax.axis("off")
    ax.set_title(f"n = {n}, blockDim.x = {block_size}: {blocks} blocks, {total - n} idle thread(s) "
                 "(grey)",
                 fontsize=8)
    return fig


def gradient_check(analytic, numeric, title: str = "backward against finite differences"):
    """Scatter of analytic gradients against finite differences; points on the diagonal agree."""
    a = np.ravel(np.asarray(analytic, np.float64))
    f = np.ravel(np.asarray(numeric, np.float64))
    if a.shape != f.shape:
        raise ValueError(f"analytic and numeric must have the same size, got {a.size} and {f.size}")
    fig, ax = _outside_pyplot((3.6, 3.2))
    lo, hi = float(min(a.min(), f.min())), float(max(a.max(), f.max()))
    ax.plot([lo, hi], [lo, hi], color="#bbbbbb", lw=1)
    ax.scatter(f, a, s=10)
    ax.set_xlabel("finite difference", fontsize=8)
    ax.set_ylabel("backward()", fontsize=8)
    ax.tick_params(labelsize=7)
    err = float(np.max(np.abs(a - f))) if a.size else 0.0
    ax.set_title(f"{title}\nmax |difference| {err:.1e}", fontsize=8)
    return fig


def speedup_bars(results, baseline: str = "v1_naive", title: str | None = None):
    """Bars of the speedup of each version over ``baseline`` at each shape (time ratio).

    ``results``: :class:`rmsnorm_lessons.bench.Timing` records or dicts with name, N, C, ms.
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


def roofline(copy_gbps: float, peak_flops: float, intensity: float,
             name: str = "RMSNorm backward", title: str | None = None):
    """The roofline: attainable FLOP/s against arithmetic intensity (FLOP per byte), log-log.

    The slanted roof is the copy bandwidth (``copy_gbps``, GB/s) times the intensity; the flat one
    is the FP32 peak (``peak_flops``, FLOP/s); they meet at the ridge, ``peak / bandwidth``. A
    kernel of ``intensity`` (``name``) is marked on the lower of the two roofs: left of the ridge,
    memory bounds it.
    """
    if not (copy_gbps > 0 and peak_flops > 0 and intensity > 0):
        raise ValueError("copy_gbps, peak_flops and intensity must be positive, got "
                         f"{copy_gbps}, {peak_flops}, {intensity}")
    bw = copy_gbps * 1e9
    ridge = peak_flops / bw
    x = np.geomspace(min(intensity, ridge) / 10, max(intensity, ridge) * 10, 200)
    fig, ax = _outside_pyplot((4.8, 2.8))
    ax.plot(x, np.minimum(bw * x, peak_flops) / 1e12, color="black", lw=1.5)
    ax.axvline(ridge, color="grey", ls=":", lw=1)
    at = min(bw * intensity, peak_flops) / 1e12
    ax.plot([intensity], [at], "o", color="#d62728")
    ax.annotate(f"{name}\n{intensity:.2f} FLOP/B: {at:.2f} TFLOP/s", (intensity, at),
                textcoords="offset points", xytext=(8, -4), fontsize=7, va="top")
    ax.annotate(f"ridge {ridge:.0f} FLOP/B", (ridge, peak_flops / 1e12), textcoords="offset points",
                xytext=(4, -12), fontsize=7)
    ax.text(x[0], bw * x[0] / 1e12 * 1.6, f"copy {copy_gbps:.0f} GB/s", fontsize=7, rotation=0)
    ax.text(x[-1], peak_flops / 1e12 * 1.15, f"FP32 peak {peak_flops / 1e12:.1f} TFLOP/s",
            fontsize=7, ha="right")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_ylim(bw * x[0] / 1e12 / 2, peak_flops / 1e12 * 3)
    ax.set_xlabel("arithmetic intensity (FLOP per byte)", fontsize=8)
    ax.set_ylabel("TFLOP/s", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.set_title(title or "roofline: the lower roof bounds the kernel", fontsize=9)
    return fig
