"""The lesson registry (rmsnorm_lessons/lessons.py) against the notebooks and the package it
names."""
import importlib
import json
import re

import pytest

from rmsnorm_lessons import ladder, lessons

CALL = re.compile(r"\b(lesson\d\d|tuning)\.(check_\w+)\(")


def _calls(lesson):
    names = []
    for cell in json.loads(lesson.path.read_text())["cells"]:
        if cell["cell_type"] == "code":
            for m in CALL.finditer("".join(cell["source"])):
                name = f"{m.group(1)}.{m.group(2)}"
                if name not in names:
                    names.append(name)
    return names


def test_one_row_per_notebook_in_order():
    stems = sorted(p.stem for p in lessons.notebook_dir().glob("[0-9][0-9]_*.ipynb"))
    assert [lesson.stem for lesson in lessons.LESSONS] == stems


@pytest.mark.parametrize("lesson", lessons.LESSONS, ids=lambda lesson: lesson.stem)
def test_row_names_what_its_notebook_calls(lesson):
    assert list(lesson.exercises) == _calls(lesson)
    for name in lesson.exercises:
        module, function = name.split(".")
        assert module in (f"lesson{lesson.number}", "tuning")
        exercises = importlib.import_module(f"rmsnorm_lessons.exercises.{module}")
        assert callable(getattr(exercises, function))
    assert lesson.kernel_exercise is None or lesson.kernel_exercise in lesson.exercises
    if lesson.rung is not None:
        assert ladder.get(lesson.rung).lesson == lesson.stem
        assert lesson.rung in lesson.kernel


def test_lookup_by_stem_and_refusal():
    assert lessons.by_stem("04_shared_memory.ipynb").rung == "v3_smem"
    with pytest.raises(ValueError, match="no lesson '99_nothing'"):
        lessons.by_stem("99_nothing")
    assert [lesson.number for lesson in lessons.kernel_exercises()] == [
        "02", "03", "04", "05", "06", "07", "08", "09", "10"]
