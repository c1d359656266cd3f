"""What the tests of several lessons share (issue 42: a lesson's tests live in
tests/test_lesson<NN>.py, and a helper two test files need lives here, once): reading a lesson's
notebook (its cells by tag, its sources and outputs as text), the order of an investigation, the
size of a figure, and the GPU's side of lesson 11's tuning check replaced by a fake.

A test file that moved here from a grouped file imports these under the names it had there
(``from _lesson_support import small_figure as _small``), so its tests read as they did."""
from __future__ import annotations

import json
from pathlib import Path

from matplotlib.figure import Figure

from rmsnorm_lessons.core import gpu
from rmsnorm_lessons.course import plots, registry

ROOT = Path(__file__).resolve().parent.parent
#: the first four lessons, whose notebooks some rules over the lessons are still tried on alone
STEMS_00_03 = ["00_setup", "01_rmsnorm_math", "02_naive", "03_warp_per_row"]
#: the lessons whose kernel exercise starts from the rung's signature, given nothing else (issue 27)
LESSONS_04_05 = ["04_shared_memory", "06_vectorized"]


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
        # an opening says "saved on <card>, <date>" or "measured now on <card>"; what changed, with
        # both sides measured in the same run, "(<card>, measured now)"
        shown = outputs(all_cells[i])
        assert any(words in shown for words in ("saved on ", "measured now on ", ", measured now)"))
    assert "nbval-ignore-output" in tags(all_cells[diagnosis])
    explained = tagged(all_cells, "explanation")
    assert explained and all(i > diagnosis for i in explained), explained
    assert all(all_cells[i]["cell_type"] == "markdown" for i in explained)
    [exercise] = tagged(all_cells, "kernel-exercise")
    decisions = [i for i in tagged(all_cells, "decision") if "BEGIN SOLUTION" in
                 text(all_cells[i])]
    assert decisions and all(i < exercise for i in decisions)


def opening_and_change_without_a_gpu(stem: str) -> list[dict]:
    """Round 2, rule 1, for lessons 05-08: the opening and what-changed cells are no ``%%gpu``
    cells, none is waiting in tests/gpu_cells_pending.txt, and each shows an output (the saved
    run's, or a GPU run's). Returns the notebook's cells."""
    all_cells = cells(stem)
    pending = (ROOT / "tests" / "gpu_cells_pending.txt").read_text()
    for tag in ("opening", "what-changed"):
        [at] = tagged(all_cells, tag)
        assert not text(all_cells[at]).startswith("%%gpu") and "gpu" not in tags(all_cells[at]), tag
        assert all_cells[at]["id"] not in pending and outputs(all_cells[at]).strip(), tag
    return all_cells


def kernel_solution(stem: str) -> str:
    """The CUDA text of the lesson's kernel exercise as the instructor's edition solves it."""
    import ast

    from rmsnorm_lessons.course import student

    [cell] = [c for c in cells(stem) if "kernel-exercise" in tags(c)]
    return ast.parse(student.solution_only(text(cell))).body[0].value.value


# --- a notebook read whole ------------------------------------------------------------------------


def notebook(stem: str) -> dict:
    """notebooks/<stem>.ipynb as JSON."""
    return json.loads((ROOT / "notebooks" / f"{stem}.ipynb").read_text(encoding="utf-8"))


def source_text(value) -> str:
    """A cell's ``source`` (or an output's ``text``) as one string: a list of lines joined."""
    return "".join(value) if isinstance(value, list) else (value or "")


def nb_cells(name: str) -> list:
    """The cells of notebooks/<name> (the file's name, ``.ipynb`` included) as nbformat reads and
    validates them: nodes with attributes (``cell.source``, ``cell.metadata``)."""
    import nbformat

    nb = nbformat.read(ROOT / "notebooks" / name, as_version=4)
    nbformat.validate(nb)
    return nb.cells


# --- a figure -------------------------------------------------------------------------------------


def small_figure(fig):
    """``fig``, once it is a Figure of the course's size (its DPI, no wider than FIGSIZE)."""
    assert isinstance(fig, Figure)
    assert fig.dpi == plots.DPI and fig.get_size_inches()[0] <= plots.FIGSIZE[0]
    return fig


# --- lesson 11's tuning check without a GPU -------------------------------------------------------


def timing_row(name, ms, spread=0.002, noisy=False):
    from types import SimpleNamespace

    return SimpleNamespace(name=name, ms=ms, ms_spread=spread, noisy=noisy)


def fake_tuning_gpu(monkeypatch, yours_ms, default_ms, ceiling_ms=0.080, space_ms=None, ok=True,
                    spread=0.002):
    """The GPU's side replaced: a check report that is ``ok``, and time_shape giving the times
    named (the space's rows ``space_ms``, else the default's time each)."""
    from types import SimpleNamespace

    from rmsnorm_lessons.core import compare
    from rmsnorm_lessons.speed import bench

    timed = []
    monkeypatch.setattr(gpu, "why_unavailable", lambda: None)
    monkeypatch.setattr(gpu, "target_facts_or_fallback", lambda: (gpu.H200, "saved"))
    monkeypatch.setattr(compare, "check_version", lambda *a, **k: SimpleNamespace(ok=ok))

    def time_shape(N, C, rows, ceiling_modes=(), copy_gbps=float("nan"), repeats=50):
        timed.append((N, C, [(spec.name, mode, config, label) for spec, mode, config, label
                             in rows], ceiling_modes, repeats))
        suffix = bench.OVERWRITE_SUFFIX if ceiling_modes[0] else ""
        out = [timing_row(bench.STREAM_NAME + suffix, ceiling_ms, spread)]
        for k, (_, _, _, label) in enumerate(rows):
            ms = {"default": default_ms, "yours": yours_ms}.get(label)
            if ms is None:
                ms = space_ms[k - 2] if space_ms else default_ms
            out.append(timing_row(label + suffix, ms, spread))
        return out

    monkeypatch.setattr(bench, "time_shape", time_shape)
    return timed
