"""A lesson's diagnosis check, shared by the lessons that open with the last rung measured: the
learner's reading judged by :func:`rmsnorm_lessons.course.diagnose.check`, except where the
opening is the saved run's and lacks the very figure the learner names (the course's saved run did
not measure every figure): then nothing can be judged here, and the verdict says NOT VERIFIED and
what would measure it, rather than asking the learner for a number no row shows."""
from __future__ import annotations

from ..course.verdict import Verdict, not_verified


def judge(opening, *, bound, cause, metric, value, this_lesson: tuple[str, ...],
          rung: str) -> Verdict:
    """The learner's ``bound``, ``cause``, ``metric`` and ``value`` against ``opening``."""
    from ..course import diagnose

    if isinstance(metric, str) and (value is None or value is Ellipsis):
        try:
            shown = diagnose.figure(opening, metric)
        except ValueError:  # not a figure's name: diagnose.check says so
            shown = 0.0
        if shown is None and not opening.measured_now:
            why = diagnose.why_missing(opening, metric)
            return not_verified(f"this opening ({opening.source}) does not show {metric} ({why}), "
                                "so a reading of it cannot be judged here: run the opening on a "
                                "GPU, where every figure is measured, or name a figure it shows")
    return diagnose.check(opening, bound=bound, cause=cause, metric=metric, value=value,
                          this_lesson=this_lesson, rung=rung)
