"""Reading a lesson's notebook in the tests of lessons 02-04 (issue 41): its cells by tag, its
sources and outputs as text."""
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
    explanation; the decision before the kernel exercise; what changed after the timing. The
    opening and what-changed cells are not ``%%gpu`` cells (round 2, rule 1): without a GPU they
    print the saved run, and the diagnosis is judged against it."""
    all_cells = cells(stem)
    [opening] = tagged(all_cells, "opening")
    [diagnosis] = tagged(all_cells, "diagnosis")
    assert opening < diagnosis
    for i in [opening] + tagged(all_cells, "what-changed"):
        assert "nbval-ignore-output" in tags(all_cells[i]) and "gpu" not in tags(all_cells[i])
        assert not text(all_cells[i]).startswith("%%gpu")
        assert "saved on " in outputs(all_cells[i]) or "measured now on " in outputs(all_cells[i])
    assert "nbval-ignore-output" in tags(all_cells[diagnosis])
    explained = tagged(all_cells, "explanation")
    assert explained and all(i > diagnosis for i in explained), explained
    assert all(all_cells[i]["cell_type"] == "markdown" for i in explained)
    [exercise] = tagged(all_cells, "kernel-exercise")
    decisions = [i for i in tagged(all_cells, "decision") if "BEGIN SOLUTION" in
                 text(all_cells[i])]
    assert decisions and all(i < exercise for i in decisions)
