"""Every picture of the course, in one module (matplotlib; no GPU needed to draw).

Figures are small on purpose: the notebooks ship with their outputs, so each PNG must stay light.
Functions return the matplotlib Figure; in a notebook it is displayed by being the cell's last value
or by ``plt.show()``. What the pictures show (lanes, sectors, banks, the butterfly) is computed in
:mod:`rmsnorm_lessons.access`; this module only draws.
"""
from __future__ import annotations

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from matplotlib.ticker import MaxNLocator

from . import access, bench, ladder, occupancy
from .ladder import v7_fast

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
    fig, ax = _figure((min(10.0, max(4.8, 1.0 * len(shapes) + 1.5)), 3.2))
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


def _small_figure(figsize=FIGSIZE, **kw):
    # a Figure outside pyplot: shown once as a cell's value, never again by the inline backend,
    # and never piling up in pyplot's list of open figures
    fig = Figure(figsize=figsize, dpi=DPI, layout="constrained")
    return fig, fig.subplots(**kw)


def access_pattern(layout: str = "thread_per_row", rows: int = 32, C: int = 64, step: int = 0,
                   block_size: int = 64, max_cols: int = 96, itemsize: int = 4):
    """The elements of ``inp`` (rows x columns) that the threads load at one step, coloured by lane.

    Thin marks inside each row are the 32-byte sector boundaries; thick horizontal lines separate the
    thread blocks. The title counts the sectors the first warp touches (:func:`access.warp_sectors`).
    ``layout``: ``"thread_per_row"`` (v1) or ``"warp_per_row"`` (v2).
    """
    layout = access.layout_name(layout)
    rows, C, block_size = int(rows), int(C), int(block_size)
    if rows < 1 or C < 1:
        raise ValueError(f"rows and C must be at least 1, got rows={rows} C={C}")
    if block_size % access.WARP or not access.WARP <= block_size <= 1024:
        raise ValueError(f"block_size must be a multiple of 32 between 32 and 1024, got {block_size}")
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

    fig, ax = _small_figure((FIGSIZE[0], min(3.6, 1.2 + 0.07 * rows)))
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
    ax.set_xlabel(f"column c (of C={C})" + (f", columns {start}..{start + width - 1} shown" if width < C else ""),
                  fontsize=8)
    ax.set_ylabel("row", fontsize=8)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.tick_params(labelsize=7)
    n_sec = access.warp_sectors(layout, C, step, 0, itemsize)
    ax.set_title(f"{access.LAYOUTS[layout]}, loop step {step}: warp 0's load touches {n_sec} sector(s) of 32 B\n"
                 f"grey marks: sector boundaries; thick lines: blocks of {block_size} threads", fontsize=8)
    bar = fig.colorbar(mesh, ax=ax, pad=0.01, fraction=0.04)
    bar.set_label("lane", fontsize=7)
    bar.ax.tick_params(labelsize=6)
    return fig


def butterfly(offsets=(16, 8, 4, 2, 1), highlight: int | None = 0):
    """The shuffle butterfly: 32 lanes (x) by steps (y, top to bottom), one line per value received.

    At a step with offset ``o`` lane ``i`` receives the value of lane ``i ^ o`` and adds it to its own.
    Lanes of one colour hold the same partial sum; the label at the right says how many lanes' inputs
    that sum contains. ``highlight`` draws in black the lines that feed lane ``highlight``'s result.
    """
    offsets = tuple(int(o) for o in offsets)
    fig, ax = _small_figure((FIGSIZE[0], 1.0 + 0.55 * (len(offsets) + 1)))
    lanes = np.arange(access.WARP)
    contains = access.butterfly_contents(offsets)  # which inputs each lane's value holds, step by step
    needed = (access.butterfly_feeders(offsets, highlight) if highlight is not None
              else np.zeros((len(offsets) + 1, access.WARP), bool))  # lanes whose value reaches the highlight
    faint, strong = [], []
    for k, o in enumerate(offsets, start=1):
        for i in lanes:
            on = highlight is not None and needed[k, i]
            (strong if on else faint).append([(i ^ o, k - 1), (i, k)])  # the value received
            if on:
                strong.append([(i, k - 1), (i, k)])  # the lane's own value, kept
        ax.text(access.WARP - 0.2, k - 0.5, f"xor {o}", fontsize=7, va="center", color="#08519c")
    # plain (not antialiased) faint lines keep the PNG small
    ax.add_collection(LineCollection(faint, colors="#9ecae1", linewidths=0.6, antialiaseds=False, zorder=1))
    ax.add_collection(LineCollection(strong, colors="black", linewidths=1.1, zorder=2))
    cmap = matplotlib.colormaps["tab20"]
    for k, m in enumerate(contains):
        groups = {}
        colour_of = [groups.setdefault(tuple(m[:, i]), len(groups)) for i in lanes]
        ax.scatter(lanes, np.full(access.WARP, k), c=[cmap(g % 20) for g in colour_of], s=18, zorder=3,
                   edgecolors="black", linewidths=0.3)
        counts = sorted({int(m[:, i].sum()) for i in lanes})
        label = "/".join(str(c) for c in counts)
        ax.text(access.WARP + 2.6, k, f"{label} lane{'s' if counts != [1] else ''}", fontsize=7, va="center")
    ax.set_yticks(range(len(offsets) + 1), ["input"] + [f"step {k}" for k in range(1, len(offsets) + 1)],
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

    One box per thread, coloured by block; threads with ``i >= n`` (greyed) exist because the grid is
    rounded up to whole blocks, which is why kernels test ``if (i < n)``.
    """
    n, block_size = int(n), int(block_size)
    if n < 1 or block_size < 1:
        raise ValueError(f"n and block_size must be at least 1, got n={n} block_size={block_size}")
    blocks = -(-n // block_size)
    total = blocks * block_size
    fig, ax = _small_figure((FIGSIZE[0], 1.5))
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
    ax.set_title(f"n = {n}, blockDim.x = {block_size}: {blocks} blocks, {total - n} idle thread(s) (grey)",
                 fontsize=8)
    return fig


def gradient_check(analytic, numeric, title: str = "backward against finite differences"):
    """Scatter of analytic gradients against finite differences; points on the diagonal agree."""
    a = np.ravel(np.asarray(analytic, np.float64))
    f = np.ravel(np.asarray(numeric, np.float64))
    if a.shape != f.shape:
        raise ValueError(f"analytic and numeric must have the same size, got {a.size} and {f.size}")
    fig, ax = _small_figure((3.6, 3.2))
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
    fig, ax = _small_figure((max(3.6, 1.0 + 1.2 * len(shapes)), 2.8))
    width = 0.8 / len(names)
    x = np.arange(len(shapes))
    for i, name in enumerate(names):
        vals = [next((base[s] / r["ms"] for r in rows if r["name"] == name and (r["N"], r["C"]) == s), np.nan)
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


# --- lessons 04-07 (shared memory, bf16, partials, the last block) ---------------------------------


def _figure_0407(figsize=FIGSIZE, **subplots):
    # a Figure outside pyplot: displayed once as a cell's value, never piling up in pyplot's list
    fig = Figure(figsize=figsize, dpi=DPI, layout="constrained")
    return fig, fig.subplots(**subplots)


def bank_conflicts(strides=(1, 2, 32), lanes: int = access.WARP, banks: int = access.BANKS):
    """Shared memory as rows of 32 four-byte banks; the cells one warp touches, coloured by lane.

    Lane ``i`` reads word ``i * stride``. A bank that holds k different touched words serves them one
    after another: a k-way conflict. The title of each panel gives the worst bank's k.
    """
    strides = list(strides)
    fig, axes = _figure_0407((FIGSIZE[0], FIGSIZE[1] + 0.3), nrows=1, ncols=len(strides), squeeze=False)
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="#f2f2f2")
    for ax, stride in zip(axes[0], strides):
        rows, bank = access.bank_layout(stride, lanes, banks)
        needed = int(rows.max()) + 1
        shown = max(4, min(needed, 32))
        grid = np.full((shown, banks), np.nan)
        for lane, (r, b) in enumerate(zip(rows, bank)):
            if r < shown:
                grid[r, b] = lane
        degree = access.bank_conflict_degree(stride, lanes, banks)
        ax.pcolormesh(np.arange(banks + 1) - 0.5, np.arange(shown + 1) - 0.5, np.ma.masked_invalid(grid),
                      cmap=cmap, vmin=0, vmax=lanes - 1)
        for y in np.arange(shown + 1) - 0.5:  # row boundaries
            ax.axhline(y, color="white", lw=0.6 if shown <= 8 else 0.2)
        ax.set_xlim(-0.5, banks - 0.5)
        ax.set_ylim(shown - 0.5, -0.5)
        if needed > shown:
            ax.text(banks / 2, shown - 1, f"... {needed - shown} more rows", ha="center", fontsize=7)
        ax.set_xticks([0, 8, 16, 24, 31])
        ax.set_yticks([0, shown - 1])
        ax.tick_params(labelsize=7)
        ax.set_xlabel("bank", fontsize=8)
        kind = "no conflict" if degree == 1 else f"{degree}-way conflict"
        ax.set_title(f"stride {stride}: {kind}", fontsize=9)
    axes[0][0].set_ylabel("row (128 bytes)", fontsize=8)
    fig.suptitle("which bank each lane of a warp hits (colour = lane 0..31)", fontsize=9)
    return fig


def v4_staging_banks(C: int = 1024, k: int = 0):
    """The banks one shared atomic of v4's loop hits: element ``k`` of every lane's 8 channels, staged
    interleaved (slot c, how v4 first shipped) and planar (slot k * C/8 + q, v4 now). Colour = lane;
    rows are 128 bytes of shared memory counted from the first row touched; each title gives the worst
    bank's number of different words (the conflict degree)."""
    v4 = ladder.v4_vec_bf16
    fig, axes = _figure_0407((FIGSIZE[0], FIGSIZE[1] * 0.8), nrows=1, ncols=2, squeeze=False)
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="#f2f2f2")
    banks = v4.BANKS
    layouts = [(True, v4.lane_slots(C, k, interleaved=True)), (False, v4.lane_slots(C, k))]
    shown = max(int(s.max() // banks - s.min() // banks) + 1 for _, s in layouts)  # one scale for both
    for ax, (interleaved, slots) in zip(axes[0], layouts):
        rows = slots // banks - slots.min() // banks
        grid = np.full((shown, banks), np.nan)
        for lane, (r, b) in enumerate(zip(rows, slots % banks)):
            grid[r, b] = lane
        ax.pcolormesh(np.arange(banks + 1) - 0.5, np.arange(shown + 1) - 0.5, np.ma.masked_invalid(grid),
                      cmap=cmap, vmin=0, vmax=v4.WARP - 1)
        for y in np.arange(shown + 1) - 0.5:
            ax.axhline(y, color="white", lw=0.6)
        ax.set_xlim(-0.5, banks - 0.5)
        ax.set_ylim(shown - 0.5, -0.5)
        ax.set_xticks([0, 8, 16, 24, 31])
        ax.set_yticks(range(shown))
        ax.tick_params(labelsize=7)
        ax.set_xlabel("bank", fontsize=8)
        degree = v4.conflict_degree(C, k, interleaved=interleaved)
        kind = "no conflict" if degree == 1 else f"{degree}-way conflict"
        ax.set_title(f"{'interleaved: slot c' if interleaved else 'planar: slot k*C/8 + q'}\n{kind}", fontsize=9)
    axes[0][0].set_ylabel("row (128 bytes)", fontsize=8)
    fig.suptitle(f"v4's shared atomic for element k = {k} of each lane's 8 channels (C = {C}; colour = lane)",
                 fontsize=9)
    return fig


def partials_reduction(rows: int = 12, warps_per_block: int = 2, blocks: int = 3, channels: int = 8):
    """v5's two passes: rows go to blocks (grid-stride), each block writes one row of C partials to
    scratch, then thread c of a second kernel adds column c top to bottom (block 0 first)."""
    colors = matplotlib.colormaps["tab10"]
    fig, ax = _figure_0407((FIGSIZE[0], FIGSIZE[1] + 0.4))
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
    ax.text(x0 + channels / 2, top - 0.7, "pass 1: partials[block, c]\n(no atomics)", ha="center", fontsize=7)
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
    ax.text(x1 + channels / 2, top - 0.7, "pass 2: thread c adds\ncolumn c, block 0 first", ha="center",
            fontsize=7)
    ax.text(x1 + channels / 2, top + blocks + 2.6, "dweight[c] += sum", ha="center", fontsize=7)
    return fig


def ticket_timeline(blocks: int = 8, seed: int = 0, reduce_time: float = 0.35):
    """A made-up run of v6: blocks finish their rows in some order, each takes a ticket from the
    counter (atomicInc wraps it to 0 at the last ticket), and the block with ticket blocks-1 sums all
    partials. Times are illustrative, not measured."""
    rng = np.random.default_rng(seed)
    finish = 1.0 + 0.25 * rng.random(blocks)
    order = np.argsort(finish, kind="stable")
    ticket = np.empty(blocks, int)
    ticket[order] = np.arange(blocks)
    fig, (ax, axc) = _figure_0407((FIGSIZE[0], FIGSIZE[1] + 1.0), nrows=2, ncols=1, sharex=True,
                                  gridspec_kw=dict(height_ratios=[3, 1.2]))
    for b in range(blocks):
        last = ticket[b] == blocks - 1
        ax.barh(b, finish[b], height=0.6, color="#9ecae1")
        ax.plot(finish[b], b, "o", color="#d62728" if last else "black", ms=4)
        ax.text(finish[b] - 0.01, b, f"ticket {ticket[b]}", fontsize=7, ha="right", va="center")
        if last:
            ax.barh(b, reduce_time, left=finish[b], height=0.6, color="#fd8d3c")
            ax.text(finish[b] + reduce_time / 2, b, "sums all\npartials", fontsize=6, ha="center", va="center")
    ax.set_yticks(range(blocks), [f"block {b}" for b in range(blocks)], fontsize=7)
    ax.invert_yaxis()
    ax.set_title("each block: its rows (from t=0), its partials, a ticket; the last ticket reduces",
                 fontsize=9)
    # the counter: 0, 1, ..., blocks-1, then the last atomicInc wraps it back to 0
    times = np.concatenate([[0.0], np.sort(finish)])
    value = [0]
    for _ in range(blocks):
        value.append(access.atomic_inc(value[-1], blocks - 1))
    axc.step(np.append(times, times[-1] + reduce_time + 0.05), value + [value[-1]], where="post", color="black")
    axc.set_ylabel("counter", fontsize=8)
    axc.set_xlabel("time (illustrative)", fontsize=8)
    axc.set_yticks([0, blocks - 1])
    axc.tick_params(labelsize=7)
    axc.set_xlim(0.8, times[-1] + reduce_time + 0.1)  # every block works on its rows from time 0
    return fig


def bf16_error_histogram(samples: dict, limit: float | None = None, xlabel: str = "error",
                         title: str = "", bins: int = 60):
    """Histograms (log x) of non-negative errors, one per label, with an optional limit line.

    ``samples``: ``{label: array}``. Each histogram shows fractions of its own values, so arrays of
    different sizes compare; zeros are counted in the legend, not drawn (log axis).
    """
    fig, ax = _figure_0407()
    arrays = {k: np.abs(np.asarray(v, dtype=np.float64)).ravel() for k, v in samples.items()}
    positive = np.concatenate([a[a > 0] for a in arrays.values()] or [np.array([1.0])])
    positive = positive[np.isfinite(positive)]
    lo = positive.min() if positive.size else 1e-8
    hi = max(positive.max() if positive.size else 1.0, limit or 0)
    edges = np.geomspace(lo, hi * 1.05, bins)
    for label, a in arrays.items():
        zeros = int((a == 0).sum())
        text = f"{label} ({a.size} values" + (f", {zeros} exact" if zeros else "") + ")"
        ax.hist(a[a > 0], bins=edges, histtype="step", lw=1.3, label=text,
                weights=np.full(int((a > 0).sum()), 1.0 / max(a.size, 1)))
    if limit is not None:
        ax.axvline(limit, color=COPY_COLOR, ls="--", lw=1.2, label=f"limit {limit:.3g}")
    ax.set_xscale("log")
    ax.set_xlabel(xlabel, fontsize=8)
    ax.set_ylabel("fraction of values", fontsize=8)
    ax.tick_params(labelsize=7)
    if title:
        ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    return fig


def shared_memory_chart(version: str = "v3_smem", block_size: int | None = None, C: int | None = None,
                        arch: str = "sm_90", Cs=None):
    """Dynamic shared memory per block (left) and blocks per SM (right) against C, for one version.

    Computed on the CPU (:func:`rmsnorm_lessons.occupancy.occupancy`, which compiles the kernel once with
    nvcc; the block and shared memory are what the version's plan launches). Lines: the 48 KiB a block gets
    without opting in, the opt-in maximum, the plan's blocks per SM.
    """
    spec = ladder.get(version)
    block = int(block_size or spec.block_size)
    lim = occupancy.limits(arch)
    step = spec.c_multiple if spec.c_multiple > 1 else 1
    Cs = np.asarray(Cs if Cs is not None else sorted({int(c) // step * step for c in np.geomspace(256, 32768, 49)}))
    smem = np.array([occupancy.launch_shape(spec, int(c), block)[2] for c in Cs]) / 1024
    blocks = np.array([occupancy.occupancy(spec, int(c), arch, block).blocks_per_sm for c in Cs])
    plans = {occupancy.plan_blocks_per_sm(spec, int(c), block) for c in Cs}
    fig, (a1, a2) = _figure_0407((FIGSIZE[0], FIGSIZE[1]), nrows=1, ncols=2)
    a1.plot(Cs, smem, color="black", lw=1.3)
    a1.axhline(lim.shared_per_block / 1024, color="#2ca02c", ls="--", lw=1, label="48 KiB: no opt-in needed")
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


# --- lesson 09 (v7_fast: the row in registers, the copy line) --------------------------------------


def v7_row_layout(C: int = 2048, K: int | None = None, block: int = 512):
    """Which thread of a row group loads which 16-byte chunk of a row in v7_fast (chunk = t + j * G).

    One column per thread of the group, one row per j (the thread's K chunks): each cell shows the chunk
    number, so a warp's 32 threads read 32 neighbouring chunks (512 contiguous bytes) at every j.
    """
    shape = v7_fast.row_layout(C, block, K)
    chunks = C // 8
    G, K = shape.group, shape.K
    grid = access.v7_chunks(C, G, K)
    fig, ax = _small_figure((FIGSIZE[0], 0.9 + 0.35 * K))
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="#eeeeee")
    ax.pcolormesh(np.arange(G + 1) - 0.5, np.arange(K + 1) - 0.5, np.ma.masked_invalid(grid), cmap=cmap,
                  vmin=0, vmax=max(chunks - 1, 1), edgecolors="white", linewidth=0.3)
    if G <= 32:
        for j in range(K):
            for t in range(G):
                if np.isfinite(grid[j, t]):
                    ax.text(t, j, f"{int(grid[j, t])}", ha="center", va="center", fontsize=5, color="white")
    for w in range(32, G, 32):
        ax.axvline(w - 0.5, color="black", lw=1)
    ax.set_xlabel(f"thread t of the row group (G = {G}; black lines: warp boundaries)", fontsize=8)
    ax.set_ylabel("j", fontsize=8)
    ax.set_yticks(range(K))
    ax.invert_yaxis()
    ax.tick_params(labelsize=7)
    idle = int(np.isnan(grid).sum())
    ax.set_title(f"C = {C}: {chunks} chunks of 8 bf16, K = {K} per thread, {shape.groups} row group(s) per "
                 f"block" + (f", {idle} idle slots" if idle else ""), fontsize=8)
    return fig


def speed_of_light(results, copy_gbps: float | None = None, target: float = 0.9,
                   title: str = "fraction of the copy bandwidth"):
    """Bars of each row's GB/s as a fraction of the copy bandwidth, per shape, with the copy line (1.0)
    and the target (``target``). ``results``: :class:`rmsnorm_lessons.bench.Timing` records or dicts."""
    rows = [r if isinstance(r, dict) else r.as_dict() for r in results]
    if not rows:
        raise ValueError("no results to draw")
    copy_gbps = copy_gbps or max((r.get("copy_gbps") or 0) for r in rows)
    if not copy_gbps:
        raise ValueError("give copy_gbps: the results do not carry it")
    names = list(dict.fromkeys(r["name"] for r in rows))
    shapes = list(dict.fromkeys((r["N"], r["C"]) for r in rows))
    fig, ax = _small_figure((max(4.8, 0.9 * len(shapes) + 2.4), 3.0))
    width = 0.8 / len(names)
    x = np.arange(len(shapes))
    for i, name in enumerate(names):
        vals = [next((r["gbps"] / copy_gbps for r in rows if r["name"] == name and (r["N"], r["C"]) == s), np.nan)
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
    """The best fraction of the copy bandwidth a kernel can reach when each launch also pays ``fixed_us``
    of start-up and finish (ramp, partials, final sum, tail), per shape: floor / (floor + fixed)."""
    spec = ladder.get("v7_fast")
    floors = np.array([spec.bytes_moved(N, C, overwrite) / (copy_gbps * 1e9) * 1e6 for N, C in shapes])
    frac = floors / (floors + fixed_us)
    fig, ax = _small_figure((max(4.8, 0.9 * len(shapes) + 2.0), 2.8))
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
                 f"({'dinp =' if overwrite else 'dinp +='}; floor at {copy_gbps:.0f} GB/s in brackets)", fontsize=8)
    return fig


def fixed_cost(lines: dict, C: int | None = None):
    """Time against N at one C, one line per kernel, with its least-squares fit ``fixed + N * per_row``.

    ``lines``: {name: [(N, ms), ...]}. Where a line meets N = 0 is what each launch costs whatever its size;
    its slope is the steady-state speed. (:func:`rmsnorm_lessons.bench.fit_fixed_cost` does the fit.)
    """
    fig, ax = _small_figure((5.2, 3.0))
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


def seed_loop_rows(N: int = 8200, C: int = 768, version: str = "v6_last_block", device=None):
    """Lesson 10: rows each warp takes in the seed's per-warp loop (row = warp's first, then + warps in the
    grid), per block of ``version``'s plan. A block whose warps take different numbers of rows meets a
    ``__syncthreads`` inside that loop with some of its warps gone: synccheck's divergent barrier."""
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
    ax.set_title(f"{version} with the seed's row loop at N = {N}: {launch.grid} blocks x {warps} warps = {stride} "
                 f"warps\nred: a block whose warps take different numbers of rows ({len(uneven)} block(s))",
                 fontsize=8)
    return fig


def profile_bars(profiles, title: str = "what Nsight Compute measured"):
    """Lesson 10: DRAM throughput (% of peak) and achieved occupancy (% of the SM's warps) per profiled rung
    (a list of :class:`rmsnorm_lessons.profile.Profile`)."""
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


# --- lesson 08 (bytes in flight) ---------------------------------------------------------------------


def bytes_in_flight(points, latency_ns: float | None = None, sms: int | None = None,
                    title: str = "bytes in flight per SM against the copy line"):
    """Fraction of the copy bandwidth against the bytes of loads each SM keeps in flight (log scale), one
    marker per kernel variant; with ``latency_ns`` and ``sms``, Little's law's prediction as a line
    (:func:`rmsnorm_lessons.inflight.predicted_fraction`). ``points``:
    :class:`rmsnorm_lessons.inflight.ScaleTiming` records or dicts with variant, in_flight_per_sm, gbps and
    copy_gbps."""
    from . import inflight

    rows = [p if isinstance(p, dict) else dict(variant=p.variant, in_flight_per_sm=p.in_flight_per_sm,
                                                  gbps=p.gbps, copy_gbps=p.copy_gbps) for p in points]
    if not rows:
        raise ValueError("no points to draw")
    fig, ax = _small_figure((5.6, 3.0))
    for i, variant in enumerate(dict.fromkeys(r["variant"] for r in rows)):
        mine = sorted((r["in_flight_per_sm"], r["gbps"] / r["copy_gbps"]) for r in rows if r["variant"] == variant)
        xs, ys = zip(*mine)
        ax.plot(np.array(xs) / 1024, ys, "o-", ms=4, lw=0.8, color=f"C{i}", label=variant)
    if latency_ns and sms:
        copy = float(np.median([r["copy_gbps"] for r in rows]))
        lo = min(r["in_flight_per_sm"] for r in rows) / 2
        hi = max(r["in_flight_per_sm"] for r in rows) * 2
        xs = np.geomspace(lo, hi, 100)
        ax.plot(xs / 1024, [inflight.predicted_fraction(x, sms, latency_ns, copy) for x in xs], "--", lw=1,
                color="grey", label=f"Little's law, {latency_ns:.0f} ns")
    ax.axhline(1.0, color=COPY_COLOR, ls="--", lw=1.2, label="copy")
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel("KiB of loads in flight per SM (threads x bytes per load x loads before use)", fontsize=8)
    ax.set_ylabel("GB/s / copy GB/s", fontsize=8)
    ax.set_ylim(0, 1.15)
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=6, loc="lower right")
    ax.set_title(title, fontsize=9)
    return fig
