"""The lessons' homes: one per lesson, named after it (``lesson04``), holding what that lesson alone
uses: its exercise checks, its pictures and its helpers (lesson 09's bytes-in-flight kernels,
lesson 11's tuning exercise, lesson 13's bugs). A notebook imports its own:
``from rmsnorm_lessons.lessons import lesson04``.

An exercise is named ``lessonNN.check_what`` in the lesson registry
(:data:`rmsnorm_lessons.course.registry.LESSONS`); the tuning exercise is ``tuning.check_tuning``,
in lesson 11's home. :func:`check_function` finds the function a name stands for.
"""
from __future__ import annotations

import importlib
import re

#: an exercise's module part, with where it lives when that is not ``lessons.<module>``
_ELSEWHERE = {"tuning": "lesson11.tuning"}


def home(module: str):
    """The lesson module an exercise name's first part names (``"lesson04"``, ``"tuning"``)."""
    where = _ELSEWHERE.get(module, module)
    if not re.fullmatch(r"lesson\d\d(\.\w+)?", where):
        raise ValueError(f"an exercise lives in a lesson's home (lessonNN or tuning), not "
                         f"{module!r}")
    return importlib.import_module(f"{__name__}.{where}")


def check_function(exercise: str):
    """The check an exercise name stands for: ``"lesson04.check_v3_kernel"`` ->
    :func:`rmsnorm_lessons.lessons.lesson04.check_v3_kernel`."""
    module, _, function = exercise.partition(".")
    if not function:
        raise ValueError(f"an exercise is named module.check_what, got {exercise!r}")
    return getattr(home(module), function)
