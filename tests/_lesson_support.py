"""What the tests of several lessons share (issue 42: a lesson's tests live in
tests/test_lesson<NN>.py, and a helper two of them need lives here, once): reading a lesson's
notebook (its cells by tag, its sources and outputs as text) and the order of an investigation."""
from __future__ import annotations

import json

from rmsnorm_lessons.course import registry


def cells(stem: str) -> list[dict]:
    return json.loads(registry.by_stem(stem).path.read_text(encoding="utf-8"))["cells"]


def text(cell: dict) -> str:
    return "".join(cell.get("source", ""))


def outputs(cell: dict) -> str:
    parts = []
    for out in cell.get("outputs", []):
        parts.append("".join(out.get("text", "")))
        parts.append("".join(out.get("data", {}).get("text/plain", "")))
    return "\n".join(parts)


def tags(cell: dict) -> list[str]:
    return cell.get("metadata", {}).get("tags", [])


def tagged(all_cells: list[dict], tag: str) -> list[int]:
    return [i for i, c in enumerate(all_cells) if tag in tags(c)]


def core(all_cells: list[dict]) -> list[dict]:
    """The lesson without its optional Explore tail."""
    end = next((i for i, c in enumerate(all_cells) if c["cell_type"] == "markdown"
                and text(c).startswith("## Explore")), len(all_cells))
    return all_cells[:end]


def shown_above(all_cells: list[dict], at: int) -> str:
    """Everything the cells above ``at`` show: sources and saved outputs."""
    return "\n".join(text(c) + "\n" + outputs(c) for c in all_cells[:at])


def investigation_order(stem: str) -> None:
    """The shape of lessons 02-04 (plan section 1): the opening, then the diagnosis, then the
    explanation; the decision before the kernel exercise; what changed after the timing."""
    all_cells = cells(stem)
    [opening] = tagged(all_cells, "opening")
    [diagnosis] = tagged(all_cells, "diagnosis")
    assert opening < diagnosis
    assert {"gpu", "nbval-ignore-output"} <= set(tags(all_cells[opening]))
    assert text(all_cells[opening]).startswith("%%gpu")
    assert "nbval-ignore-output" in tags(all_cells[diagnosis])
    explained = tagged(all_cells, "explanation")
    assert explained and all(i > diagnosis for i in explained), explained
    assert all(all_cells[i]["cell_type"] == "markdown" for i in explained)
    [exercise] = tagged(all_cells, "kernel-exercise")
    decisions = [i for i in tagged(all_cells, "decision") if "BEGIN SOLUTION" in
                 text(all_cells[i])]
    assert decisions and all(i < exercise for i in decisions)
