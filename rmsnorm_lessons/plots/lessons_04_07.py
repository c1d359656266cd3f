"""Lessons 04-08: shared memory (bank conflicts, v4's staging), bf16's error, the partials and the
last block's ticket, and the shared memory each rung asks for."""
from __future__ import annotations

import matplotlib
import numpy as np
from matplotlib.patches import Rectangle

from .. import access, ladder, occupancy
from .figure import COPY_COLOR, FIGSIZE, _outside_pyplot


def bank_conflicts(strides=(1, 2, 32), lanes: int = access.WARP, banks: int = access.BANKS):
    """Shared memory as rows of 32 four-byte banks; the cells one warp touches, coloured by lane.

    Lane ``i`` reads word ``i * stride``. A bank that holds k different touched words serves them
    one after another: a k-way conflict. The title of each panel gives the worst bank's k.
    """
    strides = list(strides)
    fig, axes = _outside_pyplot((FIGSIZE[0], FIGSIZE[1] + 0.3), nrows=1, ncols=len(strides),
                                squeeze=False)
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
        ax.pcolormesh(np.arange(banks + 1) - 0.5, np.arange(shown + 1) - 0.5,
                      np.ma.masked_invalid(grid),
                      cmap=cmap, vmin=0, vmax=lanes - 1)
        for y in np.arange(shown + 1) - 0.5:  # row boundaries
            ax.axhline(y, color="white", lw=0.6 if shown <= 8 else 0.2)
        ax.set_xlim(-0.5, banks - 0.5)
        ax.set_ylim(shown - 0.5, -0.5)
        if needed > shown:
            ax.text(banks / 2, shown - 1, f"... {needed - shown} more rows", ha="center",
                    fontsize=7)
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
    """The banks one shared atomic of v4's loop hits: element ``k`` of every lane's 8 channels,
    staged interleaved (slot c, how v4 first shipped) and planar (slot k * C/8 + q, v4 now). Colour
    = lane; rows are 128 bytes of shared memory counted from the first row touched; each title gives
    the worst bank's number of different words (the conflict degree)."""
    v4 = ladder.v4_vec_bf16
    fig, axes = _outside_pyplot((FIGSIZE[0], FIGSIZE[1] * 0.8), nrows=1, ncols=2, squeeze=False)
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="#f2f2f2")
    banks = v4.BANKS
    layouts = [(True, v4.lane_slots(C, k, interleaved=True)), (False, v4.lane_slots(C, k))]
    # one scale for both
    shown = max(int(s.max() // banks - s.min() // banks) + 1 for _, s in layouts)
    for ax, (interleaved, slots) in zip(axes[0], layouts):
        rows = slots // banks - slots.min() // banks
        grid = np.full((shown, banks), np.nan)
        for lane, (r, b) in enumerate(zip(rows, slots % banks)):
            grid[r, b] = lane
        ax.pcolormesh(np.arange(banks + 1) - 0.5, np.arange(shown + 1) - 0.5,
                      np.ma.masked_invalid(grid),
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
        layout = "interleaved: slot c" if interleaved else "planar: slot k*C/8 + q"
        ax.set_title(f"{layout}\n{kind}", fontsize=9)
    axes[0][0].set_ylabel("row (128 bytes)", fontsize=8)
    fig.suptitle(f"v4's shared atomic for element k = {k} of each lane's 8 channels (C = {C}; "
                 "colour = lane)",
                 fontsize=9)
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


def ticket_timeline(blocks: int = 8, seed: int = 0, reduce_time: float = 0.35):
    """A made-up run of v6: blocks finish their rows in some order, each takes a ticket from the
    counter (atomicInc wraps it to 0 at the last ticket), and the block with ticket blocks-1 sums
    all partials. Times are illustrative, not measured."""
    rng = np.random.default_rng(seed)
    finish = 1.0 + 0.25 * rng.random(blocks)
    order = np.argsort(finish, kind="stable")
    ticket = np.empty(blocks, int)
    ticket[order] = np.arange(blocks)
    fig, (ax, axc) = _outside_pyplot((FIGSIZE[0], FIGSIZE[1] + 1.0), nrows=2, ncols=1, sharex=True,
                                  gridspec_kw=dict(height_ratios=[3, 1.2]))
    for b in range(blocks):
        last = ticket[b] == blocks - 1
        ax.barh(b, finish[b], height=0.6, color="#9ecae1")
        ax.plot(finish[b], b, "o", color="#d62728" if last else "black", ms=4)
        ax.text(finish[b] - 0.01, b, f"ticket {ticket[b]}", fontsize=7, ha="right", va="center")
        if last:
            ax.barh(b, reduce_time, left=finish[b], height=0.6, color="#fd8d3c")
            ax.text(finish[b] + reduce_time / 2, b, "sums all\npartials", fontsize=6, ha="center",
                    va="center")
    ax.set_yticks(range(blocks), [f"block {b}" for b in range(blocks)], fontsize=7)
    ax.invert_yaxis()
    ax.set_title("each block: its rows (from t=0), its partials, a ticket; the last ticket reduces",
                 fontsize=9)
    # the counter: 0, 1, ..., blocks-1, then the last atomicInc wraps it back to 0
    times = np.concatenate([[0.0], np.sort(finish)])
    value = [0]
    for _ in range(blocks):
        value.append(access.atomic_inc(value[-1], blocks - 1))
    axc.step(np.append(times, times[-1] + reduce_time + 0.05), value + [value[-1]], where="post",
             color="black")
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
    fig, ax = _outside_pyplot()
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


def shared_memory_chart(version: str = "v3_smem", block_size: int | None = None,
                        C: int | None = None,
                        arch: str = "sm_90", Cs=None):
    """Dynamic shared memory per block (left) and blocks per SM (right) against C, for one version.

    Computed on the CPU (:func:`rmsnorm_lessons.occupancy.occupancy`, which compiles the kernel once
    with nvcc; the block and shared memory are what the version's plan launches). Lines: the 48 KiB
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
