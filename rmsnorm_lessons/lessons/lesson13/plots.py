"""Lesson 13's pictures: the seed's per-warp row loop (synccheck's divergent barrier), what Nsight
Compute measured, and the whole ladder on one roofline."""
from __future__ import annotations

import numpy as np
from matplotlib.patches import Rectangle

from ...core import ladder
from ...course.plots import FIGSIZE, _figure, _outside_pyplot


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


#: FLOPs of RMSNorm backward per element (lesson 00's count)
FLOPS_PER_ELEMENT = 11


def _labels(profiles, labels):
    if labels is not None:
        if len(labels) != len(profiles):
            raise ValueError(f"labels must name each of the {len(profiles)} profiles, got "
                             f"{len(labels)}")
        return list(labels)
    counts = {}
    for p in profiles:
        counts[p.version] = counts.get(p.version, 0) + 1
    return [p.version if counts[p.version] == 1 else f"{p.version} ({p.kernel})"
            for p in profiles]


def ladder_rows(profiles, copy_gbps: float, fp32_peak: float | None = None,
                flops_per_element: int = FLOPS_PER_ELEMENT, labels=None) -> list[dict]:
    """Lesson 13: each profiled rung as a roofline point, measured: FLOP per DRAM byte
    (``flops_per_element`` x N x C over the bytes read plus written) and GFLOP/s (the same FLOPs
    over ncu's duration), and that as a % of the roof above it (the copy line, or the FP32 peak
    right of the ridge). A profile without DRAM bytes or a duration has None there. ``profiles``:
    :class:`~rmsnorm_lessons.inspection.nsight.Profile` or openings (their main profile)."""
    if not copy_gbps > 0:
        raise ValueError(f"copy_gbps must be positive, got {copy_gbps}")
    profiles = [getattr(p, "profile", p) for p in profiles]  # an opening stands for its profile
    rows = []
    for label, p in zip(_labels(profiles, labels), profiles):
        flops = flops_per_element * p.elements
        row = dict(label=label, flop_per_byte=None, gflops=None, pct_of_roof=None)
        if p.dram_bytes and p.duration_us:
            x, y = flops / p.dram_bytes, flops / (p.duration_us * 1e-6) / 1e9
            roof = copy_gbps * x if fp32_peak is None else min(copy_gbps * x, fp32_peak / 1e9)
            row.update(flop_per_byte=x, gflops=y, pct_of_roof=100 * y / roof)
        rows.append(row)
    return rows


def ladder_table(profiles, copy_gbps: float, fp32_peak: float | None = None,
                 flops_per_element: int = FLOPS_PER_ELEMENT, labels=None) -> str:
    """:func:`ladder_rows` as a table: rung, FLOP/byte, GFLOP/s, % of the roof."""
    lines = [f"{'rung':<28} {'FLOP/byte':>9} {'GFLOP/s':>8} {'% of roof':>9}"]
    for r in ladder_rows(profiles, copy_gbps, fp32_peak, flops_per_element, labels):
        if r["gflops"] is None:
            lines.append(f"{r['label']:<28} {'no DRAM bytes or duration measured':>28}")
        else:
            lines.append(f"{r['label']:<28} {r['flop_per_byte']:>9.2f} {r['gflops']:>8.0f} "
                         f"{r['pct_of_roof']:>8.1f}%")
    return "\n".join(lines)


def ladder_roofline(profiles, copy_gbps: float, fp32_peak: float,
                    flops_per_element: int = FLOPS_PER_ELEMENT, labels=None):
    """Lesson 13: the whole ladder on one roofline, each rung where it measured
    (:func:`ladder_rows`), joined in order by arrows; the copy line (``copy_gbps``, GB/s), the FP32
    peak (``fp32_peak``, FLOP/s) and the ridge where they meet."""
    if not fp32_peak > 0:
        raise ValueError(f"fp32_peak must be positive (FLOP/s), got {fp32_peak}")
    rows = ladder_rows(profiles, copy_gbps, fp32_peak, flops_per_element, labels)
    points = [r for r in rows if r["gflops"] is not None]
    ridge = fp32_peak / (copy_gbps * 1e9)
    xs = [r["flop_per_byte"] for r in points] or [flops_per_element / 16]
    x = np.geomspace(min(min(xs), ridge) / 4, max(max(xs), ridge) * 4, 200)
    fig, ax = _outside_pyplot((FIGSIZE[0], 3.2))
    ax.plot(x, np.minimum(copy_gbps * x, fp32_peak / 1e9), color="black", lw=1.5)
    ax.axvline(ridge, color="grey", ls=":", lw=1)
    ax.annotate(f"ridge {ridge:.1f} FLOP/B", (ridge, fp32_peak / 1e9), textcoords="offset points",
                xytext=(4, -12), fontsize=7)
    ax.text(x[0], copy_gbps * x[0] * 1.4, f"copy {copy_gbps:.0f} GB/s", fontsize=7)
    ax.text(x[-1], fp32_peak / 1e9 * 1.15, f"FP32 peak {fp32_peak / 1e12:.1f} TFLOP/s",
            fontsize=7, ha="right")
    for a, b in zip(points, points[1:]):
        ax.annotate("", xy=(b["flop_per_byte"], b["gflops"]),
                    xytext=(a["flop_per_byte"], a["gflops"]),
                    arrowprops=dict(arrowstyle="->", lw=0.8, color="#1f77b4"))
    for r in points:
        ax.plot([r["flop_per_byte"]], [r["gflops"]], "o", color="#d62728", ms=4)
        ax.annotate(r["label"], (r["flop_per_byte"], r["gflops"]), textcoords="offset points",
                    xytext=(5, -3), fontsize=6)
    ax.set_xscale("log")
    ax.set_yscale("log")
    low = min([copy_gbps * x[0]] + [r["gflops"] for r in points])
    ax.set_ylim(low / 2, fp32_peak / 1e9 * 3)
    ax.set_xlabel("FLOP per DRAM byte (measured)", fontsize=8)
    ax.set_ylabel("GFLOP/s (ncu duration)", fontsize=8)
    ax.tick_params(labelsize=7)
    lacking = [r["label"] for r in rows if r["gflops"] is None]
    ax.set_title("the ladder on one roofline" + (f"\nnot placed (no DRAM bytes measured): "
                                                 f"{', '.join(lacking)}" if lacking else ""),
                 fontsize=8)
    return fig
