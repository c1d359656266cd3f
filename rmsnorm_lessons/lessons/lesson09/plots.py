"""Lesson 09's pictures: bytes in flight per SM against the copy line (Little's law), and one
load's latency level by level."""
from __future__ import annotations

import matplotlib
import numpy as np

from ...course.plots import COPY_COLOR, _outside_pyplot


def bytes_in_flight(points, latency_ns: float | None = None, sms: int | None = None,
                    title: str = "bytes in flight per SM against the copy line", marks=None):
    """Fraction of the copy bandwidth against the bytes of loads each SM keeps in flight (log
    scale), one marker per kernel variant; with ``latency_ns`` and ``sms``, Little's law's
    prediction as a line (:func:`rmsnorm_lessons.lessons.lesson09.inflight.predicted_fraction`).
    ``points``: :class:`rmsnorm_lessons.lessons.lesson09.inflight.ScaleTiming` records or dicts
    with variant, in_flight_per_sm, gbps and copy_gbps. ``marks``: {label: KiB per SM}, each a
    vertical line."""
    from . import inflight

    def as_row(p):
        return p if isinstance(p, dict) else dict(variant=p.variant,
                                                  in_flight_per_sm=p.in_flight_per_sm,
                                                  gbps=p.gbps, copy_gbps=p.copy_gbps)

    rows = [as_row(p) for p in points]
    if not rows:
        raise ValueError("no points to draw")
    fig, ax = _outside_pyplot((5.6, 3.0))
    for i, variant in enumerate(dict.fromkeys(r["variant"] for r in rows)):
        mine = sorted((r["in_flight_per_sm"],
                       r["gbps"] / r["copy_gbps"]) for r in rows if r["variant"] == variant)
        xs, ys = zip(*mine)
        ax.plot(np.array(xs) / 1024, ys, "o-", ms=4, lw=0.8, color=f"C{i}", label=variant)
    if latency_ns and sms:
        copy = float(np.median([r["copy_gbps"] for r in rows]))
        lo = min(r["in_flight_per_sm"] for r in rows) / 2
        hi = max(r["in_flight_per_sm"] for r in rows) * 2
        xs = np.geomspace(lo, hi, 100)
        ax.plot(xs / 1024, [inflight.predicted_fraction(x, sms, latency_ns, copy) for x in xs],
                "--", lw=1,
                color="grey", label=f"Little's law, {latency_ns:.0f} ns")
    for i, (label, kib) in enumerate((marks or {}).items()):
        if not kib > 0:
            raise ValueError(f"marks: {label!r} must be a positive number of KiB, got {kib!r}")
        ax.axvline(kib, color="black", ls=("--", ":", "-.")[i % 3], lw=1, label=label)
    ax.axhline(1.0, color=COPY_COLOR, ls="--", lw=1.2, label="copy")
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel("KiB of loads in flight per SM (threads x bytes per load x loads before use)",
                  fontsize=8)
    ax.set_ylabel("GB/s / copy GB/s", fontsize=8)
    ax.set_ylim(0, 1.15)
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=6, loc="lower right")
    ax.set_title(title, fontsize=9)
    return fig


def _size(nbytes: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.0f} {unit}"
    return f"{nbytes} B"


def memory_levels(chase, facts=None, title: str = "one load's latency, level by level"):
    """The memory hierarchy as levels, registers to HBM, each bar one dependent load's measured
    latency (log scale). ``chase``: :class:`rmsnorm_lessons.lessons.lesson09.inflight.Chase` (or
    anything with ``l1_ns``, ``l2_ns``, ``dram_ns``); registers are an instruction's operands, no
    load, so they get no bar. With ``facts`` (:class:`rmsnorm_lessons.core.gpu.DeviceFacts`), each
    level's capacity as the device reports it."""
    latencies = (None, chase.l1_ns, chase.l2_ns, chase.dram_ns)
    if any(not (v > 0) for v in latencies[1:]):
        raise ValueError(f"latencies must be positive, got {latencies[1:]}")
    sizes = ("", "", "", "")
    if facts is not None:
        sizes = (f"{_size(4 * facts.registers_per_multiprocessor)} per SM",
                 f"shared up to {_size(facts.shared_memory_per_multiprocessor)} per SM",
                 _size(facts.l2_bytes), _size(facts.total_memory))
    names = ("registers", "L1 + shared", "L2", "HBM")
    fig, ax = _outside_pyplot((4.8, 2.2))
    y = np.arange(len(names))[::-1]
    for i, (name, ns, size) in enumerate(zip(names, latencies, sizes)):
        if ns is None:
            ax.text(1.1, y[i], "operands: no load" + (f"; {size}" if size else ""),
                    va="center", fontsize=7)
            continue
        ax.barh(y[i], ns, color=f"C{i}", height=0.6)
        ax.text(ns * 1.1, y[i], f"{ns:.0f} ns" + (f"; {size}" if size else ""), va="center",
                fontsize=7)
    ax.set_yticks(y, names, fontsize=8)
    ax.set_ylim(-0.6, len(names) - 0.4)
    ax.set_xscale("log")
    ax.set_xlim(1, chase.dram_ns * 30)
    ax.set_xlabel("ns per dependent load (pointer chase, log scale)", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.set_title(title, fontsize=9)
    return fig
