"""Lesson 13 (finding bugs and bottlenecks): the bugs compute-sanitizer finds (:mod:`.bugs`), what
the seed gets wrong, the kernel exercise (the seed's row loop made uniform, :mod:`.exercise`), the
whole ladder profiled at one shape for one roofline (:func:`ladder_profile`), and the questions
(:mod:`.questions`).
"""
from __future__ import annotations

from .exercise import check_seed_loop, splice, split_shapes  # noqa: F401
from .plots import (  # noqa: F401  (the lesson's pictures)
    ladder_roofline,
    ladder_rows,
    ladder_table,
    profile_bars,
    seed_loop_rows,
)
from .questions import (  # noqa: F401
    LADDER_SHAPE,
    blocks_for,
    check_blocks_for_occupancy,
    check_dram_peak,
    check_dram_percent,
    check_occupancy_cap,
    check_wrap_row,
    dram_peak,
)

_PROFILED: dict = {}


def ladder_profile(version: str, config=None, *, fresh: bool = False):
    """``version`` at 16384 x 2048 (:data:`LADDER_SHAPE`), with ``config`` where given (v7's
    register path: ``Config(staged=False)``): its time and Nsight Compute profile
    (:func:`rmsnorm_lessons.course.investigate.opening`), measured now on this GPU, else the saved
    run's. Kept: a later call returns the same (``fresh=True`` measures again)."""
    from ...course import investigate

    key = (version, repr(config))
    if fresh or key not in _PROFILED:
        _PROFILED[key] = investigate.opening(version, *LADDER_SHAPE, config=config)
    return _PROFILED[key]


def ladder(versions=None):
    """Every rung of the ladder (``versions``, default the shipped rungs,
    :data:`rmsnorm_lessons.core.ladder.SHIPPED`, in course order) at :data:`LADDER_SHAPE`, v7's
    register path beside its plan's path: ``(labels, openings)``."""
    from ...core import ladder as rungs
    from ...core.ladder.v7_fast import Config

    labels, openings = [], []
    for version in versions or [r.name for r in rungs.SHIPPED]:
        labels.append(version)
        openings.append(ladder_profile(version))
        if version == "v7_fast":
            labels.append("v7_fast, register path")
            openings.append(ladder_profile(version, Config(staged=False)))
    return labels, openings


def roof(openings) -> tuple[float, float]:
    """``(copy GB/s, FP32 FLOP/s)`` of the roofline the ladder's ``openings`` sit under: the copy
    bandwidth their timings were measured against (their median; else this GPU's, or the H200's
    saved figure), and the FP32 peak of this GPU (else of the H200's saved facts)."""
    from ...core import gpu

    copies = sorted(o.timing.copy_gbps for o in openings if o.timing is not None)
    copy = copies[len(copies) // 2] if copies else gpu.copy_bandwidth_or_saved()[0]
    peak = gpu.fp32_peak_flops(gpu.facts_or_fallback()[0])
    if peak is None:
        peak = gpu.fp32_peak_flops(gpu.H200)
    return copy, peak
