"""Every lesson's first code cell is its set-up cell (tools/setup_cell.py): written by the tool,
idempotent, and present in every lesson of notebooks/ (CPU). The set-up cell run on a Colab-like
runtime is tests/test_colab_setup.py."""
from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from rmsnorm_lessons.course import colab
from rmsnorm_lessons.course import registry as lessons

ROOT = Path(__file__).resolve().parent.parent
REV = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(scope="module")
def tool():
    spec = importlib.util.spec_from_file_location("setup_cell", ROOT / "tools" / "setup_cell.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _nb(*sources):
    return {"cells": [{"cell_type": "markdown", "metadata": {}, "source": "# Lesson 02"}]
            + [{"cell_type": "code", "metadata": {"tags": ["nbval-ignore-output"]},
                "execution_count": 1, "source": s, "id": f"c{i}",
                "outputs": [{"output_type": "stream", "name": "stdout", "text": "GPU: H200\n"}]}
               for i, s in enumerate(sources)],
            "metadata": {"rmsnorm_lessons": {"device": "NVIDIA H200", "date": "2026-12-04"}},
            "nbformat": 4, "nbformat_minor": 5}


OLD = ("%matplotlib inline\nimport numpy as np\nimport rmsnorm_lessons as rl\n"
       "from rmsnorm_lessons.exercises import lesson02\nv7 = 1  # a name\n"
       "print(rl.notebook.setup())")


def _src(cell):
    return "".join(cell["source"])


def test_the_old_first_cell_is_merged_into_the_set_up_cell(tool):
    nb = tool.apply(_nb(OLD, "x = 1"), "02_naive", REV)
    first = _src(nb["cells"][1])
    assert first == (tool.head("02_naive", REV) + "\nimport numpy as np\n"
                     "from rmsnorm_lessons.exercises import lesson02\nv7 = 1  # a name")
    assert first.count("%matplotlib inline") == 1 and first.count("rl.notebook.setup()") == 1
    assert nb["cells"][1]["outputs"] == [] and nb["cells"][1]["id"] == "c0"
    assert nb["cells"][1]["metadata"]["tags"] == ["nbval-ignore-output", "setup"]
    assert _src(nb["cells"][2]) == "x = 1" and nb["cells"][2]["outputs"]  # the rest untouched
    assert nb["metadata"][tool.META] == {"revision": REV}
    assert nb["metadata"]["rmsnorm_lessons"]["device"] == "NVIDIA H200"
    assert tool.problems(nb, "02_naive") == []


def test_writing_again_changes_nothing_but_the_revision(tool):
    once = tool.apply(_nb(OLD), "02_naive", REV)
    twice = tool.apply(json.loads(json.dumps(once)), "02_naive", REV)
    assert tool._dump(twice) == tool._dump(once)
    other = "f" * 40
    moved = tool.apply(json.loads(json.dumps(once)), "02_naive", other)
    assert _src(moved["cells"][1]) == _src(once["cells"][1]).replace(REV, other)
    assert tool.problems(moved, "02_naive") == []


def test_the_check_finds_what_is_wrong(tool):
    assert tool.problems(_nb(OLD), "02_naive") == ["no revision in its metadata "
                                                   "(rmsnorm_lessons_setup)"]
    nb = tool.apply(_nb(OLD), "02_naive", REV)
    nb["cells"][1]["source"] = _src(nb["cells"][1]).replace("pip", "pip3", 1)
    assert tool.problems(nb, "02_naive") == [
        "its first code cell is not the set-up cell of the recorded revision"]
    nb = tool.apply(_nb(OLD), "02_naive", REV)
    assert tool.problems(nb, "03_warp_per_row")  # another lesson's cell
    nb["cells"][1]["source"] = tool.head("02_naive", REV).replace(tool.LAST, "")
    with pytest.raises(ValueError, match="no end line"):
        tool.tail(_src(nb["cells"][1]))


def test_bad_names_and_revisions_are_refused(tool):
    with pytest.raises(ValueError, match="stem must be a lesson's name"):
        tool.head("../x", REV)
    with pytest.raises(ValueError, match="revision must be a full commit id"):
        tool.head("02_naive", "HEAD")
    with pytest.raises(ValueError, match="no code cell"):
        tool.apply({"cells": [], "metadata": {}}, "02_naive", REV)


def test_the_head_installs_what_colab_and_the_doctor_expect(tool):
    text = tool.head("02_naive", REV)
    assert f'os.environ.get("{colab.SOURCE_ENV}")' in text
    assert 'os.environ.get("COLAB_RELEASE_TAG") or "google.colab" in sys.modules' in text
    from rmsnorm_lessons.core import project

    assert f'"git+{project.repository_url()}.git@" + COURSE_REVISION' in text
    assert f'COURSE_REVISION = "{REV}"' in text and 'doctor.report("02_naive")' in text
    # the modules it imports are there, with the names it calls
    for module, name in (("colab", "complete"), ("doctor", "report")):
        assert f"from {tool.COURSE} import {module}" in text
        assert callable(getattr(importlib.import_module(f"{tool.COURSE}.{module}"), name))
    assert max(len(line) for line in text.splitlines()) <= 100


def test_the_tool_over_a_copy_of_the_lessons(tool, tmp_path):
    from IPython.core.inputtransformer2 import TransformerManager

    for lesson in lessons.LESSONS:
        shutil.copy(lessons.notebook_dir() / lesson.notebook, tmp_path)
    paths = sorted(tmp_path.glob("*.ipynb"))
    assert tool.main(["--revision", REV, *map(str, paths)]) == 0
    written = {p: p.read_bytes() for p in paths}
    assert tool.main(["--check", *map(str, paths)]) == 0
    assert tool.main(["--revision", REV, *map(str, paths)]) == 0
    assert {p: p.read_bytes() for p in paths} == written, "a second run changed a notebook"
    for path in paths:
        nb = json.loads(path.read_text())
        _, cell = tool.first_code(nb)
        text = _src(cell)
        assert text.startswith(tool.head(path.stem, REV))
        assert "print(rl.notebook.setup())" not in text
        compile(TransformerManager().transform_cell(text), str(path), "exec")  # IPython's syntax
        assert json.loads(path.read_text())["cells"][1:] != []


def test_the_revision_is_head_of_a_clean_package(tool, tmp_path):
    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "pyproject.toml").write_text("[project]\n")
    (tmp_path / "README.md").write_text("x\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x")
    sha = subprocess.run(["git", "-C", str(tmp_path), "rev-parse", "HEAD"], capture_output=True,
                         text=True).stdout.strip()
    (tmp_path / "README.md").write_text("changed, not the package\n")
    assert tool.head_revision(tmp_path) == sha
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'y'\n")
    with pytest.raises(SystemExit, match="the package has changes HEAD does not"):
        tool.head_revision(tmp_path)


@pytest.mark.parametrize("lesson", [lesson.stem for lesson in lessons.LESSONS])
def test_every_lesson_opens_with_its_set_up_cell(tool, lesson):
    nb = json.loads((lessons.notebook_dir() / f"{lesson}.ipynb").read_text())
    assert tool.problems(nb, lesson) == [], (
        f"{lesson}: run python tools/setup_cell.py notebooks/*.ipynb")
