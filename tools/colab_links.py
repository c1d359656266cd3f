#!/usr/bin/env python3
"""The Colab and Binder links of the README's Colab block and of lesson 00's Colab cell, rendered
from the repository's address, which lives in one place: pyproject.toml's ``[project.urls]
Repository``, read by :mod:`rmsnorm_lessons.core.project`. Every link opens the learner's edition
(student/); on Colab a lesson's first cell sets the runtime up (tools/setup_cell.py writes it), so
neither place lists set-up commands to paste. After changing the address, run

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
import textwrap
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


def lessons() -> list[str]:
    return sorted(p.name for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def colab_badge(notebook: str) -> str:
    """The badge that opens ``notebook``'s learner's edition (student/) in Colab."""
    return f"[![Open In Colab]({BADGE})]({project.colab_url(notebook)})"


def binder_badge() -> str:
    return f"[![Binder]({BINDER_BADGE})]({project.binder_url()})"


def _links_table() -> list[str]:
    rows = ["| lesson | open |", "| --- | --- |"]
    for nb in lessons():
        rows.append(f"| `{nb[:-6]}` | {colab_badge(nb)} |")
    return rows


SET_UP = ("Choose a GPU runtime (Runtime > Change runtime type), then run the lesson's first "
          "cell: on Colab it installs the course at the revision the notebook was written for, "
          "PyCUDA, and nvcc, nvdisasm and ipywidgets where the runtime lacks them, then says what "
          "the runtime can and cannot do in that lesson. Running it again installs nothing.")


def readme_block() -> str:
    text = ("Every lesson's badge in the table at the top opens its learner's edition (`student/`, "
            f"no solutions) in Colab. {SET_UP} Colab's free GPU is a T4 (sm_75): see "
            "[What ran where](#what-ran-where) for what ran on which GPU and what was only "
            "compiled.")
    return "\n".join([START, *textwrap.wrap(text, 104, break_on_hyphens=False), "",
                      "Binder (no GPU: the math, compiling, SASS, plots and widgets): "
                      f"{binder_badge()}", END])


def cell_source() -> str:
    text = (f"On **Colab** (a free GPU) each lesson below opens as the learner's edition. "
            f"{SET_UP}")
    return "\n".join(["## Run this course on Colab or Binder", "",
                      *textwrap.wrap(text, 104, break_on_hyphens=False), "",
                      *_links_table(), "",
                      f"On **Binder** (no GPU: the math, compiling, SASS, plots and widgets): "
                      f"{binder_badge()}"])


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
    args = ap.parse_args(argv)
    if args.check:
        bad = problems()
        for p in bad:
            print(p, file=sys.stderr)
        return 1 if bad else 0
    write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
