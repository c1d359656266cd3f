"""`make lab`'s working folder (CPU): the student edition by default, the instructor edition with
EDITION=instructor, written into git-ignored work/<edition>/ where lessons are missing and kept
there otherwise, so opening and saving a lesson never changes a tracked file; notebooks/ holds
lessons only. (tests/test_browser.py opens and saves a lesson through `make lab` in a browser.)"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _checkout import ROOT, copy_checkout, git, status

from rmsnorm_lessons.course import registry, student

pytestmark = pytest.mark.skipif(shutil.which("make") is None or shutil.which("git") is None,
                                reason="needs make and git")


def _make(repo: Path, *args: str):
    env = dict(os.environ, PYTHONPATH=str(repo))
    return subprocess.run(["make", "--no-print-directory", "-C", str(repo), "-o", "venv",
                           "lab-folder", f"PY={sys.executable}", *args],
                          env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    return copy_checkout(tmp_path_factory.mktemp("checkout") / "repo")


def test_the_lessons_folder_holds_the_lessons_and_what_they_link_to(repo):
    tracked = git(repo, "ls-files", "notebooks").split()
    assert sorted(tracked) == sorted([f"notebooks/{lesson.notebook}" for lesson in registry.LESSONS]
                                     + [f"notebooks/{name}" for name in student.COMPANIONS])


def test_student_edition_by_default_kept_between_runs_git_clean(repo):
    p = _make(repo)
    assert p.returncode == 0, p.stdout + p.stderr
    work = repo / "work" / "student"
    assert sorted(f.name for f in work.iterdir()) == sorted([l.notebook for l in registry.LESSONS]
                                                            + list(student.COMPANIONS))
    assert not any("BEGIN SOLUTION" in f.read_text() for f in work.iterdir())
    assert status(repo) == ""
    # a learner's work stays; a lesson they deleted comes back
    mine = work / registry.LESSONS[2].notebook
    mine.write_text(mine.read_text().replace('"cells": [', '"cells": [ ', 1))
    edited = mine.read_text()
    (work / registry.LESSONS[3].notebook).unlink()
    p = _make(repo)
    assert p.returncode == 0, p.stderr
    assert f"kept {len(registry.LESSONS) - 1} already there" in p.stdout, p.stdout
    assert mine.read_text() == edited
    assert (work / registry.LESSONS[3].notebook).is_file()
    assert status(repo) == ""


def test_instructor_edition_is_a_copy(repo):
    p = _make(repo, "EDITION=instructor")
    assert p.returncode == 0, p.stdout + p.stderr
    work = repo / "work" / "instructor"
    for lesson in registry.LESSONS:
        committed = (ROOT / "notebooks" / lesson.notebook).read_bytes()
        assert (work / lesson.notebook).read_bytes() == committed
    (work / registry.LESSONS[0].notebook).write_text("{}")  # saved by the lab: untracked, ignored
    assert status(repo) == ""


def test_unknown_edition_is_refused(repo):
    p = _make(repo, "EDITION=teacher")
    assert p.returncode != 0 and "EDITION=teacher" in p.stderr, p.stderr
    assert not (repo / "work" / "teacher").exists()


def test_notebook_runs_import_this_checkout(repo, tmp_path):
    # what the lessons' folder's own conftest.py did, now the root one's: `PYTHONPATH=. pytest
    # --nbval notebooks` runs the kernels (started in notebooks/) on this checkout's package
    pytest.importorskip("nbval")
    import nbformat

    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("import rmsnorm_lessons\nprint(rmsnorm_lessons.__file__)",
                                     execution_count=1)
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout",
                                           text=f"{repo / 'rmsnorm_lessons' / '__init__.py'}\n")]
    nb.cells = [cell]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    probe = repo / "notebooks" / "zz_probe.ipynb"
    nbformat.write(nb, str(probe))
    try:
        # "." first; what PYTHONPATH held stays after it (where nbval itself may come from)
        kept = os.environ.get("PYTHONPATH", "")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (".", kept) if p))
        p = subprocess.run([sys.executable, "-m", "pytest", "--nbval", "-q",
                            "-p", "no:cacheprovider", str(probe.relative_to(repo))],
                           cwd=repo, env=env, capture_output=True, text=True, timeout=300)
    finally:
        probe.unlink()
    assert p.returncode == 0, p.stdout[-3000:]
