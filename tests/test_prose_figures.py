"""Every figure in a lesson's prose is one an output of the same notebook shows (CPU).

A figure is a number with a unit in a markdown cell (``0.121 ms``, ``4216 GB/s``, ``93.4 %``,
``860 ns``, ``1.56x``, ``99 KiB``), outside code spans. It is shown when the same number appears
in a saved output or in the code of the same notebook (a cell that computes and prints it, or the
constant it names); thousands separators are ignored. Figures not shown yet are listed, one
``stem: figure`` a line, in tests/prose_figures_allowed.txt: the list may shrink but not grow,
and an entry leaves it once its figure is shown or gone (the test says which). Lessons 00-03 quote
no measured figure in their prose at all.
"""
import json
import re
from pathlib import Path

import pytest
from _lesson_support import STEMS_00_03
from _lesson_support import notebook as _nb
from _lesson_support import source_text

from rmsnorm_lessons.course import registry

ROOT = Path(__file__).resolve().parent.parent
ALLOWED = Path(__file__).with_name("prose_figures_allowed.txt")
UNIT = (r"(?:\s?%|\s?ms\b|\s?GB/s|\s?TB/s|\s?µs|\s?us\b|\s?ns\b|x\b|×|\s?KiB\b|\s?MiB\b|\s?MB\b|"
        r"\s?GiB\b|\s?cycles\b)")
FIGURE = re.compile(r"(?<![\w.])(\d[\d,]*(?:\.\d+)?)" + UNIT)
CODE_SPAN = re.compile(r"`[^`\n]*`")


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


def shown_text(nb: dict) -> str:
    """What the notebook shows besides its prose: every output's text and every code cell."""
    parts = []
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "code":
            parts.append(_text(cell.get("source", "")))
        for out in cell.get("outputs", []):
            if "text" in out:
                parts.append(_text(out["text"]))
            for kind, value in out.get("data", {}).items():
                if kind.startswith("text/") or kind.endswith("json"):
                    parts.append(_text(value) if not isinstance(value, dict)
                                 else json.dumps(value))
    return "\n".join(parts).replace(",", "")


def figures(nb: dict) -> list[str]:
    """The figures of the notebook's markdown, in order (code spans left out)."""
    found = []
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "markdown":
            prose = CODE_SPAN.sub("", _text(cell.get("source", "")))
            found.extend(m.group(0).strip() for m in FIGURE.finditer(prose))
    return found


def unshown(nb: dict) -> list[str]:
    shown = shown_text(nb)
    out = []
    for fig in figures(nb):
        number = FIGURE.match(fig).group(1).replace(",", "")
        if not re.search(r"(?<![\d.])" + re.escape(number) + r"(?!\d)", shown):
            out.append(fig)
    return out


def allowed() -> set[tuple[str, str]]:
    if not ALLOWED.is_file():
        return set()
    rows = set()
    for line in ALLOWED.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            stem, _, fig = line.partition(": ")
            rows.add((stem.strip(), fig.strip()))
    return rows


def test_the_parser_finds_figures_outside_code_spans():
    nb = {"cells": [{"cell_type": "markdown", "source": "v1 takes 1.25 ms (`0.5 ms` is code), "
                     "at 3,801 GB/s, 41 % of copy, 2.5x v2 and 99 KiB; FP32 and sm_90 are "
                     "no figures"},
                    {"cell_type": "code", "source": "print(t)", "outputs": [
                        {"output_type": "stream", "text": "1.25 ms\n3801 GB/s\n"}]}]}
    assert figures(nb) == ["1.25 ms", "3,801 GB/s", "41 %", "2.5x", "99 KiB"]
    assert unshown(nb) == ["41 %", "2.5x", "99 KiB"], unshown(nb)


@pytest.mark.parametrize("lesson", registry.LESSONS, ids=lambda l: l.stem)
def test_every_prose_figure_is_shown_by_the_notebook(lesson):
    nb = json.loads(lesson.path.read_text())
    known = {fig for stem, fig in allowed() if stem == lesson.stem}
    missing = unshown(nb)
    new = [fig for fig in missing if fig not in known]
    assert not new, (f"{lesson.notebook}: figures in prose that no output or code cell shows: "
                     f"{new}; print them from a cell (this run, or a named results file), or "
                     "say it without the figure")
    gone = sorted(known - set(missing))
    assert not gone, (f"{lesson.notebook}: now shown or gone, remove from "
                      f"{ALLOWED.name}: {gone}")


# --- lessons 00-03: no measured figure in the prose at all ----------------------------------------


@pytest.mark.parametrize("stem", STEMS_00_03)
def test_prose_quotes_no_measured_figure(stem):
    """Prose speaks in ratios; measured figures (and this GPU's facts) are printed by cells."""
    for cell in _nb(stem)["cells"]:
        if cell["cell_type"] == "markdown":
            text = source_text(cell["source"])
            found = re.findall(r"(?<!\w)\d[\d.,]*\s*(?:GB/s|TFLOP/s|ns\b|ms\b|us\b|SMs\b|%)",
                               text)
            assert not found, (found, text[:200])
            assert "2026-" not in text
