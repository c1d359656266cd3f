"""Lesson 09's notebook as round 2 of issue 41 left it (the walk-through of lessons 03-10): without
a GPU its core shows one run (the opening's: floor, chase, table, decision, what changed), no cell
of it is a %%gpu cell or reads a name only one binds, and the decision's picture waits for a PASS.
Lesson 10's notebook test uses :func:`_gpu_free` too."""
from __future__ import annotations

import pytest
from test_lesson09 import h100_run

from rmsnorm_lessons.core import gpu
from rmsnorm_lessons.lessons import lesson09


def _cells(stem):
    import _lesson_support as nbs

    return nbs.cells(stem)


def _gpu_free(stem):
    """Round 2, rule 1: the opening and the what-changed cells are no %%gpu cells (nor listed as
    pending), and no cell outside the gpu cells reads a name only a gpu cell binds."""
    from pathlib import Path

    import _lesson_support as nbs

    from rmsnorm_lessons.course import student

    cells = _cells(stem)
    pending = (Path(__file__).parent / "gpu_cells_pending.txt").read_text()
    for tag in ("opening", "what-changed"):
        [at] = nbs.tagged(cells, tag)
        cell = cells[at]
        assert "gpu" not in nbs.tags(cell) and not nbs.text(cell).startswith("%%gpu"), tag
        assert "nbval-ignore-output" in nbs.tags(cell) and cell["outputs"], tag
        assert f"{stem} {cell['id']}" not in pending
    from_gpu: set = set()
    for cell in (c for c in cells if c["cell_type"] == "code"):
        text = nbs.text(cell)
        if "gpu" in nbs.tags(cell):
            from_gpu |= student.bound_names(text)
            continue
        leaning = student.free_names(text) & from_gpu
        assert not leaning, (cell["id"], leaning)
        from_gpu -= student.bound_names(text)


def test_the_notebook_needs_no_gpu_cell_for_its_core():
    _gpu_free("09_bytes_in_flight")
    import _lesson_support as nbs

    cells = _cells("09_bytes_in_flight")
    core = nbs.core(cells)
    gpu_cells = [c["id"] for c in core if "gpu" in nbs.tags(c)]
    assert gpu_cells == [], gpu_cells  # the ceiling and the memory levels are Explore's
    text = "\n".join(nbs.text(c) for c in cells)
    assert "copy_bandwidth_or_saved" not in text
    # round 3 (item 9, the lesson's minutes): the floor moved to the Explore tail; it still reads
    # the opening's time and the copy bandwidth measured with it (one run), not a saved copy
    [floor] = [c for c in cells if "v7.bytes_moved(" in nbs.text(c)]
    assert "before.timing" in nbs.text(floor) and floor not in core
    # the decision's picture: after the check, cleared in the learner's edition
    [check] = [i for i, c in enumerate(cells) if "check_in_flight(" in nbs.text(c)]
    assert "in_flight_marked(after=decided)" in nbs.text(cells[check + 1])
    assert "decision" in nbs.tags(cells[check + 1])


@pytest.mark.skipif(gpu.available(), reason="without a GPU: the saved run")
def test_without_a_gpu_every_figure_is_the_saved_runs():
    """The walk-through: the floor used the H200's saved copy bandwidth beside the H100's v6, and
    the table on screen was the H200's while the decision's check read the H100's. Now the
    opening, the chase, the table (which the decision reads) and what changed are one run."""
    before = lesson09.opening()
    chase, where = lesson09.chase()
    run = lesson09.scale_table()
    change = lesson09.what_changed()
    assert before.source == where == run.source == lesson09.measured().source
    assert change.before.source == change.after.source == before.source
    assert chase == run.chase
    assert lesson09.table(run).startswith(run.source)
    assert before.timing.copy_gbps == pytest.approx(run.copy_gbps, rel=0.01)


def test_the_decisions_picture_waits_for_a_pass(capsys):
    from rmsnorm_lessons.course.verdict import failed, passed

    assert lesson09.in_flight_marked(h100_run(), after=failed("no")) is None
    assert "once your decision passes" in capsys.readouterr().out
    assert lesson09.in_flight_marked(h100_run(), after=passed("yes")) is not None


@pytest.mark.skipif(gpu.available(), reason="without a GPU: the saved run")
def test_the_ceiling_shows_the_saved_runs_or_says_why_not(monkeypatch, capsys):
    """Explore's ceiling was a %%gpu cell that showed nothing without a GPU; now it is the saved
    run's (the same run as the rest), kept beside the chase and the table, or a sentence saying
    that run did not time it."""
    import dataclasses

    from rmsnorm_lessons.lessons.lesson09 import inflight
    from rmsnorm_lessons.speed.timing import Timing

    saved = inflight.saved_run()
    if not saved.ceiling:
        assert lesson09.ceiling() is None
        assert "did not time the ceiling" in capsys.readouterr().out
    rows = (Timing("stream_ceiling", 16384, 4096, 0.17, float("nan"), 402_669_568, 2368.6,
                   saved.copy_gbps),)
    with_ceiling = dataclasses.replace(saved, ceiling=rows)
    back = inflight.Run.from_dict(with_ceiling.as_dict(), saved.source)
    assert [(t.name, t.N, t.C, t.ms, t.gbps) for t in back.ceiling] == [
        ("stream_ceiling", 16384, 4096, 0.17, 2368.6)]
    assert "ceiling" not in saved.as_dict() or saved.ceiling
    monkeypatch.setattr(inflight, "saved_run", lambda run=None: back)
    shown, copy = lesson09.ceiling()
    assert [(t.name, t.ms) for t in shown] == [("stream_ceiling", 0.17)]
    assert copy == saved.copy_gbps
    assert capsys.readouterr().out.startswith(f"{saved.source}:\n")
