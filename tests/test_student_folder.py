"""student/, the learner's edition committed beside notebooks/: what ``python -m rmsnorm_lessons
student`` writes from notebooks/ now, file for file (``make student`` writes it again), and what
every Colab link of the README and the lessons opens: a file of the repository with no solution in
it whose first code cell is the set-up cell (CPU)."""
from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

from rmsnorm_lessons.core import project
from rmsnorm_lessons.course import registry as lessons, student

ROOT = Path(__file__).resolve().parent.parent
FOLDER = ROOT / project.EDITIONS["student"]
COLAB = re.compile(r"https://colab\.research\.google\.com/github/[^)\s\"'<>\]]+")


def _text(path: Path) -> str:
    if path.suffix != ".ipynb":
        return path.read_text()
    return "\n".join("".join(c.get("source", "")) for c in json.loads(path.read_text())["cells"])


def test_student_folder_is_what_student_writes_from_notebooks_now(tmp_path):
    written = student.write_student_edition([lessons.notebook_dir()], tmp_path)
    assert len(written) == len(lessons.LESSONS)
    want = {p.name: p.read_bytes() for p in tmp_path.iterdir() if not p.name.startswith(".")}
    have = {p.name: p.read_bytes() for p in FOLDER.iterdir()} if FOLDER.is_dir() else {}
    stale = sorted(n for n in set(want) | set(have) if want.get(n) != have.get(n))
    assert not stale, f"student/ differs from notebooks/ in {stale}: run make student"


@pytest.fixture(scope="module")
def setup_cell():
    spec = importlib.util.spec_from_file_location("setup_cell", ROOT / "tools" / "setup_cell.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def colab_targets() -> dict[str, set[str]]:
    """Each file of the repository a Colab link opens, with where the links are."""
    prefix = f"https://colab.research.google.com/github/{project.repository_path()}/blob/" \
             f"{project.BRANCH}/"
    sources = [ROOT / "README.md", *sorted((ROOT / "notebooks").glob("*.ipynb")),
               *sorted(FOLDER.glob("*.ipynb"))]
    found: dict[str, set[str]] = {}
    for path in sources:
        for url in COLAB.findall(_text(path)):
            assert url.startswith(prefix), f"{path.name}: {url} opens another repository"
            found.setdefault(url[len(prefix):], set()).add(path.relative_to(ROOT).as_posix())
    return found


def test_every_colab_link_opens_a_learners_edition_that_sets_itself_up(setup_cell):
    targets = colab_targets()
    assert len(targets) >= len(lessons.LESSONS) >= 14, sorted(targets)
    for rel, where in sorted(targets.items()):
        path = ROOT / rel
        assert path.is_file(), f"{rel} (linked from {sorted(where)}) is not in the repository"
        text = path.read_text()
        assert student.BEGIN not in text and student.END not in text, f"{rel} has solutions"
        nb = json.loads(text)
        assert setup_cell.problems(nb, path.stem) == [], (rel, setup_cell.problems(nb, path.stem))
