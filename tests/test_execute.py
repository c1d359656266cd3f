"""rmsnorm_lessons.course.execute: a lesson re-executed in place, or, when a cell raises, left as it
was."""
from __future__ import annotations

import json

import nbformat
import pytest

from rmsnorm_lessons.course import execute
from rmsnorm_lessons.course.notebook import RUN_KEY

pytestmark = pytest.mark.slow


def _notebook(path, *sources):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nbformat.write(nb, path)
    return path


def test_a_lesson_is_executed_in_place_and_says_where(tmp_path):
    path = _notebook(tmp_path / "ok.ipynb", "print(6 * 7)")
    assert execute.main([str(path)]) == 0
    nb = json.loads(path.read_text())
    assert nb["cells"][0]["outputs"][0]["text"] == ["42\n"]
    assert set(nb["metadata"][RUN_KEY]) == {"device", "date"}


def test_a_lesson_that_raises_keeps_its_file_and_leaves_what_it_ran(tmp_path, capsys):
    path = _notebook(tmp_path / "bad.ipynb", "print('first')", "raise ValueError('cell two')",
                     "print('never')")
    before = path.read_bytes()
    assert execute.main([str(path)]) == 1
    assert path.read_bytes() == before
    assert "FAILED" in capsys.readouterr().out
    partial = json.loads(execute.failed_path(path).read_text())
    assert partial["cells"][0]["outputs"][0]["text"] == ["first\n"]
    assert partial["cells"][1]["outputs"][0]["ename"] == "ValueError"
    assert partial["cells"][2]["outputs"] == []
