"""Where the mutation suite reads each kernel exercise: the instructor's solution text in the
lesson's notebook (:func:`solution_text`) and the check that judges it (:func:`check_function`).
:mod:`tests._mutations` re-exports both."""
from __future__ import annotations

import ast
import json
import re

from rmsnorm_lessons import lessons
from rmsnorm_lessons.course import registry, student


def _tagged(nb: dict, tag: str) -> list[str]:
    return [student._source(c) for c in nb.get("cells", [])
            if c.get("cell_type") == "code" and tag in c.get("metadata", {}).get("tags", [])]


def solution_text(lesson: registry.Lesson) -> str:
    """The instructor's CUDA text of ``lesson``'s kernel exercise, markers and skeletons removed."""
    module, function = lesson.kernel_exercise.split(".")
    call = re.compile(rf"\b{module}\.{function}\s*\(\s*(\w+)")
    nb = json.loads(lesson.path.read_text())
    names = {m.group(1) for src in _tagged(nb, "exercise-check") for m in call.finditer(src)}
    if len(names) != 1:
        raise LookupError(f"{lesson.notebook}: expected one cell tagged exercise-check calling "
                          f"{lesson.kernel_exercise} on a variable, found {sorted(names)}")
    name = names.pop()
    for src in _tagged(nb, "kernel-exercise"):
        for node in ast.parse(student.solution_only(src)).body:
            if (isinstance(node, ast.Assign) and len(node.targets) == 1
                    and isinstance(node.targets[0], ast.Name) and node.targets[0].id == name
                    and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
                return node.value.value
    raise LookupError(f"{lesson.notebook}: no cell tagged kernel-exercise assigns {name} a string")


def check_function(lesson: registry.Lesson):
    return lessons.check_function(lesson.kernel_exercise)
