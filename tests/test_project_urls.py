"""The repository's address lives in one place, pyproject.toml's [project.urls] Repository, and
every Colab and Binder link that ships is built from it by rmsnorm_lessons.core.project (CPU)."""
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rmsnorm_lessons.core import project
from rmsnorm_lessons.course.registry import LESSONS

ROOT = Path(__file__).resolve().parent.parent
SKIP_DIRS = {".git", ".venv", "build", "work", "node_modules", ".ipynb_checkpoints"}
COLAB = re.compile(r"https://colab\.research\.google\.com/github/[^)\s\"'<>]+")
BINDER = re.compile(r"https://mybinder\.org/v2/gh/[^)\s\"'<>]+")


def _shipped(*suffixes):
    """The files of the checkout git would ship (tracked, or new and not ignored: a stale build
    folder or egg-info left by an older install is no part of it); every file outside git."""
    try:
        listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "--cached", "--others",
                                 "--exclude-standard"], capture_output=True, text=True,
                                check=True).stdout.splitlines()
        paths = [ROOT / name for name in listed]
    except (OSError, subprocess.CalledProcessError):
        paths = list(ROOT.rglob("*"))
    for path in paths:
        if (path.is_file() and path.suffix in suffixes
                and not SKIP_DIRS & set(path.relative_to(ROOT).parts)):
            yield path


def _text(path: Path) -> str:
    if path.suffix != ".ipynb":
        return path.read_text(errors="replace")
    cells = json.loads(path.read_text())["cells"]
    return "\n".join("".join(c.get("source", "")) for c in cells)


def test_the_address_is_pyprojects_repository():
    text = (ROOT / "pyproject.toml").read_text()
    m = re.search(r'^\[project\.urls\]\n(?:#.*\n)*Repository = "([^"]+)"$', text, re.M)
    assert m, "pyproject.toml has no [project.urls] Repository line"
    assert project.repository_url() == m.group(1)
    assert re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+", m.group(1))
    assert project.repository_path() == m.group(1).removeprefix("https://github.com/")


def test_no_owner_placeholder_ships():
    found = [str(p.relative_to(ROOT)) for p in _shipped(".md", ".ipynb", ".py", ".toml", ".txt",
                                                         ".html", ".cfg", ".yml", "")
             if p.name != Path(__file__).name and re.search(r"\bOWNER\b", _text(p))]
    assert found == []


def test_every_badge_url_is_built_from_the_one_place():
    sources = [ROOT / "README.md", *sorted((ROOT / "notebooks").glob("*.ipynb")),
               *sorted((ROOT / project.EDITIONS["student"]).glob("*.ipynb"))]
    stems = {lesson.stem for lesson in LESSONS}
    seen = 0
    for path in sources:
        text = _text(path)
        for url in COLAB.findall(text):
            stem = url.rsplit("/", 1)[1].removesuffix(".ipynb")
            assert stem in stems, f"{path.name}: {url} opens no lesson"
            assert url == project.colab_url(stem), f"{path.name}: {url} is not the learner's"
            seen += 1
        for url in BINDER.findall(text):
            assert url == project.binder_url(), f"{path.name}: {url}"
            seen += 1
    # the README's lesson links and lesson 00's cell: a Colab badge a lesson each, and Binder twice
    assert seen >= 2 * len(LESSONS) + 2


def test_lesson_00s_colab_cell_and_the_readme_point_at_the_set_up_cell():
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import colab_links
    finally:
        sys.path.remove(str(ROOT / "tools"))
    for text in (colab_links.readme_block(), colab_links.cell_source()):
        assert "run the lesson's first cell" in " ".join(text.split())
        assert "git clone" not in text and "pip install" not in text
        assert project.binder_url() in text
    assert all(project.colab_url(nb) in colab_links.cell_source() for nb in colab_links.lessons())
    p = subprocess.run([sys.executable, str(ROOT / "tools" / "colab_links.py"), "--check"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr


def test_urls_name_the_lesson_and_the_edition():
    assert project.colab_url("10_v7_one_pass") == project.colab_url("10_v7_one_pass.ipynb")
    assert project.colab_url("02_naive").endswith("/blob/main/student/02_naive.ipynb")
    assert project.colab_url("02_naive", "instructor").endswith(
        "/blob/main/notebooks/02_naive.ipynb")
    assert project.binder_url().endswith("?labpath=student/00_setup.ipynb")
    assert project.binder_url("02_naive", "instructor").endswith(
        "?labpath=notebooks/02_naive.ipynb")
    with pytest.raises(ValueError, match="stem must be a lesson's file name"):
        project.colab_url("../x y")
    with pytest.raises(ValueError, match="edition must be one of student, instructor"):
        project.colab_url("02_naive", "teacher")
    assert project.file_url("notebooks/02_naive.ipynb") == (
        f"{project.repository_url()}/blob/main/notebooks/02_naive.ipynb")
    for bad in ("/etc/passwd", "../x", ""):
        with pytest.raises(ValueError, match="path must be a file of the repository"):
            project.file_url(bad)


def test_both_readers_agree(tmp_path, monkeypatch):
    toml = tmp_path / "pyproject.toml"
    toml.write_text('[project]\nname = "x"\n\n[project.urls]\n# why\n'
                    'Repository = "https://github.com/someone/fork"\n\n'
                    '[tool.x]\nRepository = "no"\n')
    assert project._from_pyproject(toml) == "https://github.com/someone/fork"
    monkeypatch.setitem(sys.modules, "tomllib", None)  # Python 3.10: no tomllib
    assert project._from_pyproject(toml) == "https://github.com/someone/fork"


def test_a_bad_address_is_refused(monkeypatch, tmp_path):
    toml = tmp_path / "pyproject.toml"
    toml.write_text('[project.urls]\nRepository = "https://gitlab.com/a/b"\n')
    monkeypatch.setattr(project, "PYPROJECT", toml)
    project.repository_url.cache_clear()
    try:
        with pytest.raises(ValueError, match=r"Repository must be https://github.com/<owner>/"):
            project.repository_url()
    finally:
        project.repository_url.cache_clear()
