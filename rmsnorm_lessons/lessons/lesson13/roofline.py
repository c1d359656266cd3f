"""Lesson 13's ladder: every shipped rung profiled at one shape (:data:`LADDER_SHAPE`), for one
roofline (:func:`rmsnorm_lessons.lessons.lesson13.plots.ladder_roofline`)."""
from __future__ import annotations

#: the shape of the ladder's profiles (section 5)
LADDER_SHAPE = (16384, 2048)
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
