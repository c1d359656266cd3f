"""Lesson 06 (v4 as the seed has it: its staging, its tolerance, cache hints): the learner measures
v4's first draft (the interleaved layout), names what holds it, decides where each channel lives in
shared memory, writes that slot, its two uses and the cache hints, and measures what changed.

* :func:`opening`: ``v4_interleaved`` at 16384 x 2048 (``after=True``: v4_vec_bf16), time and
  profile, no reading; :func:`check_diagnosis` judges the learner's reading of it;
* :mod:`.slots`: the decision (:func:`check_slot`), the banks picture, the questions on slots;
* :mod:`.kernel`: the kernel exercise (:func:`check_v4_kernel`) and the streaming-store question;
* :mod:`.tolerance`: the seed's check against the best bf16 answer (:func:`seed_check`) and the
  question on how its dweight error grows with N (:func:`check_tolerance_n`).
"""
from __future__ import annotations

from ...core import ladder
from ...course.verdict import Verdict
from ..changed import guess_beside  # noqa: F401 (the what-changed cell's guess)
from ..lesson05 import bf16_error_histogram  # noqa: F401 (the tolerance section draws it)
from .kernel import STORE_LINE, check_streaming_store, check_v4_kernel  # noqa: F401
from .slots import (check_four_wide_conflict, check_planar_slot, check_slot,  # noqa: F401
                    interleaved, planar, v4_staging_banks, worst_conflict)
from .tolerance import EPS, SEED_TOL, check_tolerance_n, seed_check, tolerance_n  # noqa: F401

SHAPE = (16384, 2048)
BEFORE, AFTER = ladder.v4_vec_bf16.INTERLEAVED, "v4_vec_bf16"
THIS_LESSON = ("bank_conflicts",)
_SEEN: dict = {}


def opening(after: bool = False):
    """``v4_interleaved`` (v4 as a first draft stages dweight: channel c at slot c) at 16384 x
    2048, measured on this GPU (time and an Nsight Compute profile; without a GPU or ncu, the saved
    run's), printed without a reading; ``after=True``: v4_vec_bf16, the layout this lesson
    builds."""
    from ...course import investigate

    ladder.v4_interleaved()
    if after:  # v4 as lesson 07 opens with it (the same call, so one saved entry)
        from .. import lesson07

        found = lesson07.measured_call(AFTER)
    else:
        found = investigate.opening(BEFORE, *SHAPE)
    _SEEN[bool(after)] = found
    return found


def measured(after: bool = False):
    """The opening this process measured (or loaded) last, else :func:`opening`'s: what the
    diagnosis is judged against, and where a solution reads a figure from."""
    return _SEEN.get(bool(after)) or opening(after)


def check_diagnosis(bound=None, cause=None, metric=None, value=None,
                    against=None) -> Verdict:
    """The learner's reading of the draft's opening (see :func:`rmsnorm_lessons.lessons.lesson05.
    check_diagnosis` for the arguments)."""
    from ..diagnosis import judge

    seen = against if against is not None else measured()
    return judge(seen, bound=bound, cause=cause, metric=metric, value=value,
                 this_lesson=THIS_LESSON, rung="v4_vec_bf16")
