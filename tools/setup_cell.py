#!/usr/bin/env python3
"""Make the first code cell of every lesson the set-up cell, and keep it so.

    python tools/setup_cell.py notebooks/*.ipynb           # write: the revision is git's HEAD
    python tools/setup_cell.py --check notebooks/*.ipynb   # exit 1 where a first cell is not it
    python tools/setup_cell.py --revision SHA FILE...      # record another commit

The set-up cell, the same in every lesson but for the lesson's name and the revision:

* on Colab (``COLAB_RELEASE_TAG`` set, or ``google.colab`` imported: how Colab tells itself) it
  installs the course with pip from the repository's git URL at the commit this tool recorded
  (``$RMSNORM_LESSONS_SOURCE`` overrides the source: a clone, a wheel), then calls
  ``colab.complete``, which adds PyCUDA, the nvcc and nvdisasm wheels and ipywidgets where the
  runtime lacks them;
* everywhere it registers ``%%gpu`` (``rl.notebook.setup()``) and prints the environment doctor
  (``doctor.report(<lesson>)``): the GPU and the tools, and what this lesson does without each.

Below the set-up part the cell keeps the lesson's own first lines (its imports, a name or two):
they are what the lesson's first cell held before, less ``%matplotlib inline`` and the
``rl.notebook.setup()`` line, which the set-up part has. Running the tool again rewrites only the
set-up part, so it is idempotent: at the same revision it changes nothing. The revision is recorded
in the notebook's metadata (:data:`META`) too; tests/test_setup_cell.py holds every lesson to it.

The revision must be a commit the repository's git URL serves (pushed), with the package as the
notebook expects it: the tool refuses to record HEAD while rmsnorm_lessons/, kernels/ or
pyproject.toml have changes that HEAD does not (commit them first, or pass --revision).
"""
from __future__ import annotations

import argparse
import fcntl
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from rmsnorm_lessons.core import project  # noqa: E402  (the checkout's package, beside this tool)

#: the package that holds colab and doctor
COURSE = "rmsnorm_lessons.course"
META = "rmsnorm_lessons_setup"  # the notebook metadata key: {"revision": <commit>}
TAG = "setup"
FIRST = "# Set-up: run this cell first."
LAST = "# ---- the lesson's own names ----"
LOCK = Path("/tmp/notebooks.lock")
PACKAGE_PATHS = ("rmsnorm_lessons", "kernels", "pyproject.toml")
_REVISION = re.compile(r"[0-9a-f]{40}")
#: what the set-up part replaces in a lesson's old first cell
_REPLACED = re.compile(r"^\s*(%matplotlib inline|import rmsnorm_lessons as rl|"
                       r"(print\()?rl\.notebook\.setup\(\)\)?)\s*(#.*)?$")


def head(stem: str, revision: str) -> str:
    """The set-up part of lesson ``stem``'s first cell, installing ``revision`` on Colab."""
    if not re.fullmatch(r"\d\d_\w+", stem or ""):
        raise ValueError(f"stem must be a lesson's name such as '02_naive', got {stem!r}")
    if not _REVISION.fullmatch(revision or ""):
        raise ValueError(f"revision must be a full commit id (40 hex digits), got {revision!r}")
    url = f"git+{project.repository_url()}.git@"
    return "\n".join([
        FIRST + " On Colab it installs the course at the revision this notebook was",
        "# written for (PyCUDA, nvcc, nvdisasm and ipywidgets too, where missing); everywhere it "
        "says",
        "# what this machine can and cannot do in this lesson. tools/setup_cell.py writes it.",
        "import os, sys",
        f'COURSE_REVISION = "{revision}"',
        'if os.environ.get("COLAB_RELEASE_TAG") or "google.colab" in sys.modules:',
        "    import importlib, subprocess",
        '    SOURCE = os.environ.get("RMSNORM_LESSONS_SOURCE") or (',
        f'        "{url}" + COURSE_REVISION)',
        "    try:",
        f"        from {COURSE} import colab",
        "    except ImportError:",
        '        print("Installing the course from", SOURCE, "...")',
        '        pip = [sys.executable, "-m", "pip", "install", "-q", SOURCE]',
        "        if subprocess.run(pip).returncode:",
        '            raise SystemExit("pip could not install the course: its message is above")',
        "        importlib.invalidate_caches()",
        f"        from {COURSE} import colab",
        "    colab.complete(COURSE_REVISION, SOURCE)",
        "%matplotlib inline",
        "import rmsnorm_lessons as rl",
        f"from {COURSE} import doctor",
        "rl.notebook.setup()  # the %%gpu cell magic",
        f'print(doctor.report("{stem}"))',
        LAST,
    ])


def _source(cell) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def tail(source: str) -> str:
    """The lesson's own lines of a first cell: below the set-up part where it has one, else the
    old cell's lines less those the set-up part replaces."""
    lines = source.split("\n")
    if lines and lines[0].startswith(FIRST):
        if LAST not in lines:
            raise ValueError(f"the set-up part has no end line {LAST!r}: restore it, or put the "
                             f"lesson's old first cell back")
        return "\n".join(lines[lines.index(LAST) + 1:]).strip("\n")
    return "\n".join(line for line in lines if not _REPLACED.match(line)).strip("\n")


def cell_source(stem: str, revision: str, old: str) -> str:
    """The first cell of lesson ``stem``: the set-up part, then the lesson's own lines of
    ``old``."""
    rest = tail(old)
    return head(stem, revision) + ("\n" + rest if rest else "")


def first_code(nb: dict):
    """``(index, cell)`` of the notebook's first code cell; ValueError where it has none."""
    for i, cell in enumerate(nb.get("cells", [])):
        if cell.get("cell_type") == "code":
            return i, cell
    raise ValueError("the notebook has no code cell")


def recorded(nb: dict) -> str | None:
    meta = nb.get("metadata", {}).get(META)
    return meta.get("revision") if isinstance(meta, dict) else None


def apply(nb: dict, stem: str, revision: str) -> dict:
    """``nb`` (changed in place and returned) with its first code cell the set-up cell of
    ``revision``, recorded in its metadata."""
    _, cell = first_code(nb)
    text = cell_source(stem, revision, _source(cell))
    if text != _source(cell):
        cell["source"] = text.splitlines(keepends=True)
        cell["outputs"], cell["execution_count"] = [], None
    tags = cell.setdefault("metadata", {}).setdefault("tags", [])
    for tag in (TAG, "nbval-ignore-output"):  # its output is this machine's
        if tag not in tags:
            tags.append(tag)
    nb.setdefault("metadata", {})[META] = {"revision": revision}
    return nb


def problems(nb: dict, stem: str) -> list[str]:
    """Why the notebook's first code cell is not its set-up cell (empty where it is)."""
    revision = recorded(nb)
    if revision is None:
        return [f"no revision in its metadata ({META})"]
    try:
        _, cell = first_code(nb)
        want = cell_source(stem, revision, _source(cell))
    except ValueError as exc:
        return [str(exc)]
    out = []
    if _source(cell) != want:
        out.append("its first code cell is not the set-up cell of the recorded revision")
    if TAG not in cell.get("metadata", {}).get("tags", []):
        out.append(f"its first code cell is not tagged {TAG!r}")
    return out


def _dump(nb: dict) -> str:
    return json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def head_revision(root: Path = ROOT) -> str:
    """git's HEAD in ``root``; SystemExit where the package has changes HEAD does not."""
    def git(*args):
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                              check=True).stdout.strip()

    dirty = git("status", "--porcelain", "--", *PACKAGE_PATHS)
    if dirty:
        raise SystemExit("setup_cell: the package has changes HEAD does not (commit them first, "
                         "or pass --revision):\n" + dirty)
    return git("rev-parse", "HEAD")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("notebooks", nargs="+", type=Path)
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 where not")
    ap.add_argument("--revision", help="the commit to record (default: git's HEAD)")
    args = ap.parse_args(argv)
    for path in args.notebooks:
        if not path.is_file():
            ap.error(f"{path}: no such notebook")
    if args.check:
        bad = [f"{p}: {why}" for p in args.notebooks
               for why in problems(json.loads(p.read_text(encoding="utf-8")), p.stem)]
        print("\n".join(bad) or f"setup_cell: {len(args.notebooks)} notebooks open with their "
                                 f"set-up cell", file=sys.stderr if bad else sys.stdout)
        return 1 if bad else 0
    revision = args.revision or head_revision()
    if not _REVISION.fullmatch(revision):
        ap.error(f"--revision must be a full commit id (40 hex digits), got {revision!r}")
    LOCK.touch(exist_ok=True)
    with open(LOCK) as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for path in args.notebooks:
            text = path.read_text(encoding="utf-8")
            new = _dump(apply(json.loads(text), path.stem, revision))
            if new != text:
                path.write_text(new, encoding="utf-8")
            print(f"setup_cell: {path}: {'written' if new != text else 'unchanged'} "
                  f"(revision {revision[:12]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
