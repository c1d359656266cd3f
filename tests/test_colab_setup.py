"""Every lesson's set-up cell on a Colab-like runtime: a fresh venv with IPython (as Colab has) and
no rmsnorm_lessons, Colab's environment variable set, no GPU. The first lesson's cell installs the
course (from a wheel built here: ``$RMSNORM_LESSONS_SOURCE``, where Colab takes the git URL at the
recorded revision) and what the runtime lacks; every lesson's cell then runs and prints its doctor,
without a traceback; running a cell again installs nothing. The cells are those tools/setup_cell.py
writes into a copy of the lessons. Needs a package index (or a pip cache) for the dependencies."""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rmsnorm_lessons.course import colab
from rmsnorm_lessons.course import registry as lessons

ROOT = Path(__file__).resolve().parent.parent
REV = "0123456789abcdef0123456789abcdef01234567"
pytestmark = pytest.mark.slow
#: runs one cell in IPython, as a notebook would; exit status 1 where the cell failed
DRIVER = """
import sys
from IPython.terminal.interactiveshell import TerminalInteractiveShell
shell = TerminalInteractiveShell.instance()
result = shell.run_cell(open(sys.argv[1]).read())
sys.exit(0 if result.success else 1)
"""
UNREACHABLE = ("Could not find a version", "No matching distribution")


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "RMSNORM_LESSONS_KERNELS", "VIRTUAL_ENV", "RMSNORM_ARCH")}
    return {**env, **extra}


def _run(cmd, cwd, env=None, timeout=900):
    p = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env or _env(), capture_output=True,
                       text=True, timeout=timeout)
    print(f"$ {' '.join(map(str, cmd))}\n{p.stdout}{p.stderr}")
    return p


@pytest.fixture(scope="module")
def cells(tmp_path_factory) -> dict:
    """Each lesson's set-up cell, as the tool writes it into a copy of the lessons."""
    spec = importlib.util.spec_from_file_location("setup_cell", ROOT / "tools" / "setup_cell.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    folder = tmp_path_factory.mktemp("lessons")
    out = {}
    for lesson in lessons.LESSONS:
        nb = tool.apply(json.loads(lesson.path.read_text()), lesson.stem, REV)
        (folder / lesson.notebook).write_text(tool._dump(nb))
        out[lesson.stem] = "".join(tool.first_code(nb)[1]["source"])
    return out


@pytest.fixture(scope="module")
def runtime(tmp_path_factory):
    """(python of a fresh venv with IPython only, the course's wheel, a folder with no checkout)."""
    where = tmp_path_factory.mktemp("colab")
    p = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", where / "dist",
              ROOT], where)
    if p.returncode and any(u in p.stderr for u in UNREACHABLE):
        pytest.skip(f"no package index for the build backend: {p.stderr.strip()[-200:]}")
    assert p.returncode == 0, p.stderr
    (wheel,) = (where / "dist").glob("rmsnorm_lessons-*.whl")
    assert _run([sys.executable, "-m", "venv", where / "venv"], where).returncode == 0
    py = where / "venv" / "bin" / "python"
    p = _run([py, "-m", "pip", "install", "-q", "ipython"], where)
    if p.returncode and any(u in p.stderr for u in UNREACHABLE):
        pytest.skip(f"no package index for IPython: {p.stderr.strip()[-200:]}")
    assert p.returncode == 0, p.stderr
    assert _run([py, "-c", "import rmsnorm_lessons"], where).returncode == 1, "not fresh"
    (where / "driver.py").write_text(DRIVER)
    return py, wheel, where


def _cell(runtime, text: str, name: str):
    py, wheel, where = runtime
    path = where / f"{name}.ipy"
    path.write_text(text)
    env = _env(COLAB_RELEASE_TAG="release-colab-test", **{colab.SOURCE_ENV: str(wheel)})
    return _run([py, where / "driver.py", path], where, env)


def test_every_lessons_set_up_cell_on_a_colab_like_runtime(cells, runtime):
    first, *rest = lessons.LESSONS
    p = _cell(runtime, cells[first.stem], first.stem)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert f"Installing the course from {runtime[1]} ..." in p.stdout
    if shutil.which("nvidia-smi") is None:
        assert "No NVIDIA driver in this runtime" in p.stdout
    assert f"Lesson {first.number} ({first.title}) on this machine:" in p.stdout
    for lesson in rest:
        p = _cell(runtime, cells[lesson.stem], lesson.stem)
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
        assert "Installing" not in p.stdout, p.stdout  # installed by the first lesson's cell
        assert f"Lesson {lesson.number} ({lesson.title}) on this machine:" in p.stdout
        assert "Traceback" not in p.stdout + p.stderr
        doctor = p.stdout[p.stdout.index(f"Lesson {lesson.number} ("):].splitlines()
        names = [line.split()[0] for line in doctor[1:6]]
        assert names == ["GPU", "nvcc", "ncu", "compute-sanitizer", "nvdisasm"], doctor


def test_the_set_up_cell_run_again_installs_nothing(cells, runtime):
    stem = lessons.LESSONS[0].stem
    _cell(runtime, cells[stem], stem)  # installed, whatever ran before
    p = _cell(runtime, cells[stem], stem)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "Installing" not in p.stdout
    assert "Colab: everything the course uses is installed." in p.stdout
