"""The README's install lines run as written on a fresh machine: each in a fresh venv (activated:
its bin/ first on PATH, so ``python3`` is the venv's), from a copy of the checkout as git sees it;
the git URL is that copy's (``git+file://localhost/...``), the one change to the lines. Then,
from a folder with no checkout, the installed course shows a kernel's SASS with the nvdisasm it
brought. Needs a package index (or a pip cache) for the dependencies."""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from _checkout import copy_checkout

ROOT = Path(__file__).resolve().parent.parent
START, END = "<!-- install:start -->", "<!-- install:end -->"
pytestmark = pytest.mark.slow
UNREACHABLE = ("Could not find a version", "No matching distribution")


def install_lines(readme: Path = ROOT / "README.md") -> list[str]:
    """The commands of the README's install block, comments dropped."""
    text = readme.read_text()
    block = text[text.index(START) + len(START):text.index(END)]
    lines = [line for line in block.splitlines() if line.strip() and not line.startswith("```")]
    return [shlex.join(shlex.split(line, comments=True)) for line in lines]


def test_the_block_names_a_clone_a_wheel_build_its_wheel_and_the_git_url():
    from rmsnorm_lessons.core import project

    lines = install_lines()
    version = re.search(r'^version = "([^"]+)"$', (ROOT / "pyproject.toml").read_text(),
                        re.M).group(1)
    assert lines == [
        "python3 -m pip install '.[progress]'",
        "python3 -m pip wheel --no-deps -w dist .",
        f"python3 -m pip install './dist/rmsnorm_lessons-{version}-py3-none-any.whl[progress]'",
        f"python3 -m pip install 'rmsnorm-lessons[progress] @ git+{project.repository_url()}.git'",
    ]


def _env(venv: Path) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "RMSNORM_LESSONS_KERNELS", "RMSNORM_ARCH")}
    return {**env, "VIRTUAL_ENV": str(venv), "PATH": f"{venv / 'bin'}:{env.get('PATH', '')}"}


def _sh(command: str, cwd: Path, env: dict):
    p = subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True,
                       timeout=1200)
    print(f"$ {command}\n{p.stdout}{p.stderr}")
    if p.returncode and any(u in p.stderr for u in UNREACHABLE):
        pytest.skip(f"no package index here: {p.stderr.strip()[-200:]}")
    return p


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    return copy_checkout(tmp_path_factory.mktemp("clone") / "rmsnorm-lessons")


@pytest.mark.parametrize("lines", [[0], [1, 2], [3]], ids=["clone", "wheel", "git-url"])
def test_install_lines_run_as_written(lines, clone, tmp_path):
    from rmsnorm_lessons.core import project

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    env = _env(venv)
    for i in lines:
        # file://localhost/...: the pip of a fresh venv (23.2 with Python 3.11) refuses a
        # git+file:/// URL with no host in a requirement
        command = install_lines()[i].replace(f"git+{project.repository_url()}.git",
                                             f"git+file://localhost{clone}")
        p = _sh(command, clone, env)
        assert p.returncode == 0, p.stderr[-3000:]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    p = _sh("python3 -m rmsnorm_lessons inspect v1_naive --arch sm_90 --sass", elsewhere, env)
    assert p.returncode == 0, p.stderr[-3000:]
    assert re.search(r"LDG\.E", p.stdout) and "nvdisasm was not found" not in p.stdout
    p = _sh("python3 -m rmsnorm_lessons student OUT", elsewhere, env)
    assert p.returncode == 0 and len(list((elsewhere / "OUT").glob("*.ipynb"))) >= 14, p.stderr
