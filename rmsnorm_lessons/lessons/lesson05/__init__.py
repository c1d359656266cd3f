"""Lesson 05 (bf16 storage and 128-bit loads: v4, a first draft): the learner measures v3, names
what holds it, decides what one lane loads at a time, writes v4's first draft and measures what
changed.

* :func:`opening`: v3_smem at the seed's shape (``after=True``: ``v4_interleaved``, the draft's
  layout as we built it), time and profile, no reading; :func:`check_diagnosis` judges the learner's
  reading of it (:func:`rmsnorm_lessons.course.diagnose.check`);
* :mod:`.layout`: the decision (:func:`check_v4_layout`) and its picture (:func:`lane_loads`);
* :mod:`.draft`: the kernel exercise (:func:`check_v4_draft`);
* :mod:`.bf16`: bf16 on the host, the questions, the Explore exercises.
"""
from __future__ import annotations

from ...core import ladder
from ...course.verdict import Verdict
from ..changed import guess_beside  # noqa: F401 (the what-changed cell's guess)
from .bf16 import (bf16_error_histogram, check_bf16_round, check_half_ulp,  # noqa: F401
                   check_range, check_sum_stalls)
from .draft import check_v4_draft, only_wide_row_accesses, wide_accesses  # noqa: F401
from .layout import check_v4_layout, lane_loads, sector_count  # noqa: F401

#: the shape the lesson measures (the seed's), the rung before and the draft's layout after
SHAPE = (8192, 1024)
BEFORE, AFTER = "v3_smem", ladder.v4_vec_bf16.INTERLEAVED
#: the causes this lesson's rung removes: more bytes a load in flight, half the bytes a value
THIS_LESSON = ("few_loads_in_flight", "storage_width")

_SEEN: dict = {}  # the openings this process measured (or loaded): False -> before, True -> after


def opening(after: bool = False):
    """v3_smem at 8192 x 1024, measured on this GPU (time and an Nsight Compute profile; without a
    GPU or ncu, the saved run's, labelled with its card and date), printed without a reading;
    ``after=True``: the same for ``v4_interleaved``, v4 as a first draft stages it."""
    from ...course import investigate

    if after:
        ladder.v4_interleaved()
    found = investigate.opening(AFTER if after else BEFORE, *SHAPE)
    _SEEN[bool(after)] = found
    return found


def measured(after: bool = False):
    """The opening this process measured (or loaded) last, else :func:`opening`'s: what the
    diagnosis is judged against, and where a solution reads a figure from."""
    return _SEEN.get(bool(after)) or opening(after)


def check_diagnosis(bound=None, cause=None, metric=None, value=None,
                    against=None) -> Verdict:
    """The learner's reading of v3's opening: ``bound`` ("memory" or "latency"), the ``cause`` and
    the ``metric`` that shows it (names of ``rl.diagnose.causes()``), and the metric's ``value`` as
    read from the opening. ``against``: the opening to judge (default:
    :func:`measured`)."""
    from ..diagnosis import judge

    seen = against if against is not None else measured()
    return judge(seen, bound=bound, cause=cause, metric=metric, value=value,
                 this_lesson=THIS_LESSON, rung="v4's first draft")
