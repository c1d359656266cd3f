#!/usr/bin/env python3
"""The Colab and Binder links, rendered from ONE placeholder: REPO below.

The repository's public URL is not known yet: REPO is a placeholder. When the course is published,
change REPO here (and only here), then run

    python3 tools/colab_links.py            # rewrites the README's Colab block and lesson 00's
    Colab cell python3 tools/colab_links.py --check    # exit 1 if either differs from what REPO
    renders (a test runs this)

It writes the README between <!-- colab:start --> and <!-- colab:end --> and, in
notebooks/00_setup.ipynb, the markdown cell tagged ``colab-setup`` (inserted right after the
lesson's title cell when missing: the course's shape wants the title first), under the notebooks'
lock (/tmp/notebooks.lock).
"""
from __future__ import annotations

import argparse
import fcntl
import json
import re
import sys
from pathlib import Path

REPO = "https://github.com/OWNER/rmsnorm-lessons"  # placeholder: the public URL is not known yet
BRANCH = "main"

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
LESSON00 = ROOT / "notebooks" / "00_setup.ipynb"
TAG = "colab-setup"
LOCK = Path("/tmp/notebooks.lock")
START, END = "<!-- colab:start -->", "<!-- colab:end -->"
BADGE = "https://colab.research.google.com/assets/colab-badge.svg"
BINDER_BADGE = "https://mybinder.org/badge_logo.svg"
NVCC_WHEELS = ('"nvidia-cuda-nvcc==13.0.*" "nvidia-cuda-crt==13.0.*" "nvidia-nvvm==13.0.*" '
               '"nvidia-cuda-runtime==13.0.*" "nvidia-cuda-cccl==13.0.*"')


def _path() -> str:
    m = re.fullmatch(r"https://github\.com/([^/]+/[^/]+?)(\.git)?/?", REPO)
    if not m:
        raise SystemExit(f"REPO must be https://github.com/<owner>/<name>, got {REPO!r}")
    return m.group(1)


def lessons() -> list[str]:
    return sorted(p.name for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def colab_url(notebook: str) -> str:
    return f"https://colab.research.google.com/github/{_path()}/blob/{BRANCH}/notebooks/{notebook}"


def binder_url() -> str:
    return f"https://mybinder.org/v2/gh/{_path()}/{BRANCH}?labpath=notebooks/00_setup.ipynb"


def setup_commands() -> list[str]:
    """What to run in the first cell of a Colab GPU runtime (Runtime > Change runtime type >
    GPU)."""
    return [
        f"!git clone --depth 1 {REPO}.git",
        f"%cd {_path().split('/')[1]}",
        "!pip install -q -e .                   # the course and its helpers",
        "!pip install -q pycuda                 # PyCUDA, built against the runtime's CUDA "
        "(/usr/local/cuda)",
        f"!command -v nvcc || pip install -q {NVCC_WHEELS}",
        "!python -m rmsnorm_lessons info         # what works here: GPU, PyCUDA, nvcc",
    ]


def _links_table() -> list[str]:
    rows = ["| lesson | open |", "| --- | --- |"]
    for nb in lessons():
        rows.append(f"| `{nb[:-6]}` | [![Open In Colab]({BADGE})]({colab_url(nb)}) |")
    return rows


def readme_block() -> str:
    lines = [START,
             "Every lesson opens in Colab with a GPU runtime (Runtime > Change runtime type). The "
             "course is",
             "run on an H200 only: on Colab's T4 (sm_75) every kernel compiles, untried. Run the "
             "set-up lines",
             "below in the first cell. They clone the course, install it and PyCUDA, and",
             "install NVIDIA's nvcc wheels only where the runtime has no `nvcc`; `%cd` makes the "
             "checkout the",
             "working folder, so `import rmsnorm_lessons` and `kernels/` work at once (no restart "
             "needed).",
             "For the widgets, Colab needs `from google.colab import output; "
             "output.enable_custom_widget_manager()`.",
             "",
             "```", *setup_commands(), "```", "",
             *_links_table(), "",
             f"Binder (no GPU: the math, compiling, SASS, plots and widgets): "
             f"[![Binder]({BINDER_BADGE})]({binder_url()})",
             "",
             f"`{REPO}` is a placeholder until the course is published: it is defined once, in",
             "`tools/colab_links.py`, which renders this block and lesson 00's Colab cell (a test "
             "keeps them equal).",
             END]
    return "\n".join(lines)


def cell_source() -> str:
    lines = ["## Run this course on Colab or Binder", "",
             "On **Colab** (a free GPU): Runtime > Change runtime type > GPU, then paste into a "
             "new first code cell",
             "and run it:", "", "```", *setup_commands(), "```", "",
             *_links_table(), "",
             f"On **Binder** (no GPU: the math, compiling, SASS, plots and widgets): "
             f"[![Binder]({BINDER_BADGE})]({binder_url()})",
             "",
             f"(`{REPO}` is a placeholder until the course is published; `tools/colab_links.py` "
             f"renders this cell.)"]
    return "\n".join(lines)


def _render_readme(text: str) -> str:
    if START in text and END in text:
        before, rest = text.split(START, 1)
        return before + readme_block() + rest.split(END, 1)[1]
    raise SystemExit(f"README.md has no {START} ... {END} block")


def _find_cell(nb: dict):
    for i, cell in enumerate(nb.get("cells", [])):
        if TAG in cell.get("metadata", {}).get("tags", []):
            return i, cell
    return None, None


def _source(cell) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def problems() -> list[str]:
    out = []
    if _render_readme(README.read_text()) != README.read_text():
        out.append("README.md's Colab block differs from what tools/colab_links.py renders")
    i, cell = _find_cell(json.loads(LESSON00.read_text()))
    if cell is None:
        out.append(f"{LESSON00.name} has no markdown cell tagged {TAG}")
    elif i != 1 or cell.get("cell_type") != "markdown" or _source(cell) != cell_source():
        out.append(f"{LESSON00.name}'s {TAG} cell is not the markdown cell after the title, "
                   f"rendered from REPO")
    return out


def write() -> None:
    README.write_text(_render_readme(README.read_text()))
    LOCK.touch(exist_ok=True)
    with open(LOCK) as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        nb = json.loads(LESSON00.read_text(encoding="utf-8"))
        i, cell = _find_cell(nb)
        if cell is not None:
            nb["cells"].pop(i)
        nb["cells"].insert(1, {"cell_type": "markdown", "id": "colab-setup",
                               "metadata": {"tags": [TAG]},
                               "source": cell_source().splitlines(keepends=True)})
        with open(LESSON00, "w", encoding="utf-8") as f:
            json.dump(nb, f, indent=1, ensure_ascii=False)
            f.write("\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Render the Colab/Binder links from REPO (see the "
                                             "module docstring).")
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 when out of date")
    ap.add_argument("--commands", action="store_true",
                    help="print the Colab set-up commands and exit")
    args = ap.parse_args(argv)
    if args.commands:
        print("\n".join(setup_commands()))
        return 0
    if args.check:
        bad = problems()
        for p in bad:
            print(p, file=sys.stderr)
        return 1 if bad else 0
    write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
