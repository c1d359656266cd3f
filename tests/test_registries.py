"""The registries are the only lists: ``ladder.RUNGS`` of the rungs, the lesson registry of the
lessons. No line of the package, the tests or the tools names three rungs by hand (a set of rungs is
derived from their records), and a rung added exactly as CONTRIBUTING.md says passes the tests that
cover every rung (slow: a copy of the repository, the tests run there in a child process)."""
from __future__ import annotations

import fnmatch
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rmsnorm_lessons.core import ladder

ROOT = Path(__file__).resolve().parent.parent
SCANNED = ("rmsnorm_lessons", "tests", "tools")
#: the tests that cover every rung, run with the throwaway rung on the ladder
RUNG_TESTS = ("tests/test_build.py", "tests/test_ladder.py", "tests/test_sass.py",
              "tests/test_launch_math.py", "tests/test_safety.py", "tests/test_validation.py",
              "tests/test_occupancy.py", "tests/test_ladder_arguments.py", "tests/test_imports.py")


def _named_rungs(line: str) -> set[str]:
    return {name for name in re.findall(r"[\"'](\w+)[\"']", line) if name in ladder.VERSIONS}


def test_no_line_lists_three_rungs_by_hand():
    found = []
    for folder in SCANNED:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if len(_named_rungs(line)) >= 3:
                    found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, ("derive these sets from ladder.SHIPPED (a rung's fields: dtype, c_multiple, "
                       "config_check, max_block, ...), not by naming the rungs:\n"
                       + "\n".join(found))


def test_the_scan_sees_a_hand_made_list():
    names = list(ladder.VERSIONS)
    assert len(_named_rungs(f'ALL = ("{names[0]}", "{names[1]}", "{names[2]}")')) == 3
    assert _named_rungs(f'"{names[0]}_slip", "{names[1]}"') == {names[1]}


NAME = "v8_throwaway"
KERNEL = "rmsnorm_backward_v8"


#: folders the copy leaves out: git's own, and the lessons, the saved runs and the lab (no rung test
#: reads them)
LEFT_OUT = (".git", "notebooks", "results", "lab")


def _ignored_by_git() -> list[str]:
    """The patterns of the checkout's .gitignore and, where there is a .git, its info/exclude."""
    lines = []
    for path in (ROOT / ".gitignore", ROOT / ".git" / "info" / "exclude"):
        lines += path.read_text().splitlines() if path.is_file() else []
    return [line.strip() for line in lines if line.strip() and not line.startswith(("#", "!"))]


def _ignored(relative: str, is_dir: bool, patterns: list[str]) -> bool:
    for pattern in patterns:
        if pattern.endswith("/") and not is_dir:
            continue
        pattern = pattern.rstrip("/")
        if "/" in pattern:  # anchored at the checkout's root
            if fnmatch.fnmatchcase(relative, pattern.lstrip("/")):
                return True
        elif fnmatch.fnmatchcase(relative.rsplit("/", 1)[-1], pattern):
            return True
    return False


def _ignores_itself(folder: Path) -> bool:
    """A folder whose own .gitignore ignores all of it (``*``: what tool caches write)."""
    own = folder / ".gitignore"
    return own.is_file() and "*" in own.read_text().split()


def _copy_of_the_repository(target: Path) -> None:
    """The working tree as it is on disk (tracked and new files, not what .gitignore ignores), but
    LEFT_OUT. Walked, not listed by ``git ls-files``: the tree the suite runs may be a copy of a
    working tree whose .git is missing or holds another commit's index (the lent GPU machine's
    .git is an older commit's, from before the package's wings: its ls-files lacked every moved
    file)."""
    patterns = _ignored_by_git()
    for folder, dirs, files in os.walk(ROOT):
        here = Path(folder).relative_to(ROOT).as_posix()
        prefix = "" if here == "." else here + "/"
        dirs[:] = [d for d in dirs if not (not prefix and d in LEFT_OUT or d == ".git")
                   and not _ignored(prefix + d, True, patterns)
                   and not _ignores_itself(Path(folder) / d)]
        for name in files:
            if not _ignored(prefix + name, False, patterns):
                (target / here).mkdir(parents=True, exist_ok=True)
                shutil.copy2(Path(folder) / name, target / here / name)


@pytest.mark.slow
def test_a_rung_is_three_files(tmp_path):
    repo = tmp_path / "repo"
    _copy_of_the_repository(repo)
    # CONTRIBUTING.md's three steps: the kernel, the ladder module, one line in RUNGS
    kernel = (repo / "kernels" / "v3_smem.cu").read_text().replace("rmsnorm_backward_v3", KERNEL)
    (repo / "kernels" / f"{NAME}.cu").write_text(kernel)
    # its module: the nearest rung's (v3_smem's) copied, its names changed
    ladder_dir = repo / "rmsnorm_lessons" / "core" / "ladder"
    module = (ladder_dir / "v3_smem.py").read_text()
    module = module.replace("rmsnorm_backward_v3", KERNEL).replace("v3_smem", NAME)
    assert NAME in module and KERNEL in module
    (ladder_dir / f"{NAME}.py").write_text(module)
    registry = ladder_dir / "__init__.py"
    text = registry.read_text()
    last = f'    "{ladder.RUNGS[-1]}",\n'
    assert last in text, "RUNGS is no longer one name a line: update CONTRIBUTING.md and this test"
    registry.write_text(text.replace(last, last + f'    "{NAME}",\n', 1))
    env = {"PYTHONPATH": str(repo), "RMSNORM_CACHE_DIR": str(tmp_path / "cache"),
           "PATH": __import__("os").environ["PATH"]}
    probe = subprocess.run([sys.executable, "-c", "import rmsnorm_lessons as rl; "
                            "print(rl.__file__, rl.ladder.VERSIONS[-1])"], cwd=repo, env=env,
                           capture_output=True, text=True)
    assert probe.stdout.split() == [str(repo / "rmsnorm_lessons" / "__init__.py"), NAME], probe
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p",
                           "no:cacheprovider", "-m", "not slow and not gpu", *RUNG_TESTS],
                          cwd=repo, env=env, capture_output=True, text=True, timeout=1500)
    tail = "\n".join(done.stdout.splitlines()[-25:])
    assert done.returncode == 0, f"the rung tests fail with a new rung on the ladder:\n{tail}"
    assert NAME in subprocess.run([sys.executable, "-m", "pytest", "-q", "--collect-only", "-p",
                                   "no:cacheprovider", "tests/test_ladder.py"], cwd=repo, env=env,
                                  capture_output=True, text=True).stdout
