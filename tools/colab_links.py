#!/usr/bin/env python3
"""The Colab and Binder links of the README's Colab block and of lesson 00's Colab cell, rendered
from the repository's address, which lives in one place: pyproject.toml's ``[project.urls]
Repository``, read by :mod:`rmsnorm_lessons.core.project`. After changing it there, run

    python3 tools/colab_links.py            # rewrites the README's Colab block and lesson 00's
                                            # Colab cell
    python3 tools/colab_links.py --check    # exit 1 if either differs from what it renders (a test
                                            # runs this)

It writes the README between <!-- colab:start --> and <!-- colab:end --> and, in
notebooks/00_setup.ipynb, the markdown cell tagged ``colab-setup`` (inserted right after the
lesson's title cell when missing: the course's shape wants the title first), under the notebooks'
lock (/tmp/notebooks.lock).
"""
from __future__ import annotations

import argparse
import fcntl
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from rmsnorm_lessons.core import project  # noqa: E402  (the checkout's package, beside this tool)

README = ROOT / "README.md"
LESSON00 = ROOT / "notebooks" / "00_setup.ipynb"
TAG = "colab-setup"
LOCK = Path("/tmp/notebooks.lock")
START, END = "<!-- colab:start -->", "<!-- colab:end -->"
BADGE = "https://colab.research.google.com/assets/colab-badge.svg"
BINDER_BADGE = "https://mybinder.org/badge_logo.svg"
NVCC_WHEELS = ('"nvidia-cuda-nvcc==13.0.*" "nvidia-cuda-crt==13.0.*" "nvidia-nvvm==13.0.*" '
               '"nvidia-cuda-runtime==13.0.*" "nvidia-cuda-cccl==13.0.*"')


def lessons() -> list[str]:
    return sorted(p.name for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def colab_badge(notebook: str) -> str:
    return f"[![Open In Colab]({BADGE})]({project.colab_url(notebook)})"


def binder_badge() -> str:
    return f"[![Binder]({BINDER_BADGE})]({project.binder_url()})"


def setup_commands() -> list[str]:
    """What to run in the first cell of a Colab GPU runtime (Runtime > Change runtime type >
    GPU): Colab's working folder is /content; running the cell again reuses the checkout."""
    folder = f"/content/{project.checkout_name()}"
    return [
        f"!test -d {folder} || git clone --depth 1 {project.repository_url()}.git {folder}",
        f"%cd {folder}",
        '!pip install -q -e ".[gpu]"          # the course and PyCUDA (built against '
        "/usr/local/cuda)",
        f"!command -v nvcc || pip install -q {NVCC_WHEELS}",
        "!python -m rmsnorm_lessons info      # what works here: GPU, PyCUDA, nvcc",
    ]


def _links_table() -> list[str]:
    rows = ["| lesson | open |", "| --- | --- |"]
    for nb in lessons():
        rows.append(f"| `{nb[:-6]}` | {colab_badge(nb)} |")
    return rows


def readme_block() -> str:
    lines = [START,
             "Every lesson opens in Colab with a GPU runtime (Runtime > Change runtime type): its "
             "badge is in",
             "the table at the top. Run the set-up lines below in the first cell. They clone the "
             "course,",
             "install it with PyCUDA, and install NVIDIA's nvcc wheels only where the runtime has "
             "no `nvcc`;",
             "`%cd` makes the checkout the working folder, so `import rmsnorm_lessons` and "
             "`kernels/` work at",
             "once (no restart needed). For the widgets, Colab needs",
             "`from google.colab import output; output.enable_custom_widget_manager()`.",
             "",
             "```", *setup_commands(), "```", "",
             "Colab's free GPU is a T4 (sm_75): see [What ran where](#what-ran-where) for what was "
             "run on",
             "which GPU and what was only compiled.",
             "",
             f"Binder (no GPU: the math, compiling, SASS, plots and widgets): {binder_badge()}",
             END]
    return "\n".join(lines)


def cell_source() -> str:
    lines = ["## Run this course on Colab or Binder", "",
             "On **Colab** (a free GPU): Runtime > Change runtime type > GPU, then paste into a "
             "new first code cell",
             "and run it:", "", "```", *setup_commands(), "```", "",
             *_links_table(), "",
             f"On **Binder** (no GPU: the math, compiling, SASS, plots and widgets): "
             f"{binder_badge()}"]
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
                   f"rendered from [project.urls] Repository")
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
    ap = argparse.ArgumentParser(description="Render the Colab/Binder links from pyproject.toml's "
                                             "[project.urls] Repository (see the module "
                                             "docstring).")
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
