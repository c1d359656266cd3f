"""Lesson 02 (CPU): the first profile and its light diagnosis (bound and figure, no cause), v1
written whole from its signature, and the lesson's shape (issue 41); the atomics and sectors of v1
(the exercises), each likely wrong answer failing with a useful message."""
import ast

import pytest
from _lesson_support import cells, investigation_order, outputs, shown_above, tagged, text

from rmsnorm_lessons import twin
from rmsnorm_lessons.core import build, gpu
from rmsnorm_lessons.course import notebook, student
from rmsnorm_lessons.lessons import lesson02

STEM = "02_naive"


@pytest.fixture
def saved(monkeypatch):
    """The saved opening, whatever this machine has: the verdicts below quote its figures."""
    monkeypatch.setattr(gpu, "why_unavailable", lambda: "hidden by the test: saved run")
    monkeypatch.setattr(lesson02, "_OPENINGS", {})
    return lesson02.opening()


def test_the_opening_is_v1_at_the_seeds_shape_and_prints_no_reading(saved):
    assert (saved.version, saved.shape) == ("v1_naive", (8192, 1024))
    assert saved.profile.dram_pct is not None and not saved.measured_now
    shown = str(saved)
    assert "-bound" not in shown and "bound:" not in shown
    assert lesson02.opening() is saved  # measured once: the diagnosis judges what was shown


def test_the_intended_diagnosis_passes_and_gives_the_reading(saved):
    verdict = lesson02.check_diagnosis("latency", "dram_pct", saved.figure("dram_pct"))
    assert verdict.passed, verdict
    assert "latency-bound" in verdict.message and saved.source in verdict.message
    assert lesson02.check_diagnosis("latency-bound", "dram_pct", saved.profile.dram_pct).passed


@pytest.mark.parametrize("bound,metric,value,why", [
    ("memory", "dram_pct", None, "read the row 'DRAM throughput' again"),
    ("latency", "occupancy_pct", "occupancy", "the bound is read from how busy DRAM was"),
    ("latency", "stall:long_scoreboard", "stall:long_scoreboard", "how busy DRAM was"),
    ("latency", "dram_pct", "occupancy", "you read dram_pct"),
    ("latency", "dram", None, "is not a figure"),
    (..., "dram_pct", None, "replace the ..."),
    ("latency", "dram_pct", ..., "replace the ..."),
])
def test_each_likely_wrong_diagnosis_says_why(saved, bound, metric, value, why):
    figure = {None: saved.figure("dram_pct"), "occupancy": saved.figure("occupancy_pct"),
              "stall:long_scoreboard": saved.figure("stall:long_scoreboard")}
    verdict = lesson02.check_diagnosis(bound, metric, figure[value] if value in figure else value)
    assert verdict.status == "NOT YET" and why in verdict.message, verdict


def test_the_lesson_reads_before_it_is_told():
    investigation_order(STEM)
    all_cells = cells(STEM)
    [opening] = tagged(all_cells, "opening")
    primer = next(i for i, c in enumerate(all_cells) if text(c).startswith("## Reading a profile"))
    rule = next(i for i, c in enumerate(all_cells) if "rl.nsight.rule()" in text(c))
    assert primer < rule < opening
    # the timing above the diagnosis names no cause
    [timing] = [c for c in all_cells if "rl.predict.versus(mine_v1" in text(c)]
    assert "atomics" not in text(timing) and "uncoalesced" not in text(timing)
    # what lesson 03 diagnoses stays out of lesson 02's prose
    prose = "\n".join(text(c) for c in all_cells if c["cell_type"] == "markdown")
    assert "## Why it is slow" not in prose and "Too few threads" not in prose


def _exercise_text():
    [at] = tagged(cells(STEM), "kernel-exercise")
    return at, ast.parse(text(cells(STEM)[at])).body[0].value.value


def test_v1_is_written_whole_from_its_signature():
    at, solution = _exercise_text()
    skeleton = student.strip_solutions(solution)
    body = skeleton[skeleton.index("{") + 1:skeleton.rindex("}")]
    assert all(line.strip().startswith("// TODO") for line in body.splitlines() if line.strip())
    written = student.solution_lines(solution)
    assert sum(1 for line in written if line.strip()) >= 17
    # no line of the answer is shown above the exercise, nor the kernel's text
    above = shown_above(cells(STEM), at)
    leaked = [ln.strip() for ln in written if len(ln.strip()) >= 12 and ln.strip() in above]
    assert not leaked, leaked
    assert "row * C" not in above and "atomicAdd(&dweight" not in above


@pytest.mark.skipif(build.find_nvcc() is None, reason="nvcc not found")
def test_without_a_gpu_the_skeleton_is_not_yet_and_a_wrong_v1_reveals_nothing(monkeypatch, capsys):
    monkeypatch.setattr(gpu, "why_unavailable", lambda: "hidden by the test")
    _, solution = _exercise_text()
    assert lesson02.check_v1_kernel(student.strip_solutions(solution),
                                    sanitize=False).status == "NOT YET"
    right = lesson02.check_v1_kernel(solution, sanitize=False)
    assert right.status == ("PASS" if twin.available() is None else "NOT VERIFIED"), right
    # the wrong v1: the projection's sign flipped; ours stays hidden after it
    flipped = solution.replace("(dnorm - norm * dnorm_norm_mean)", "(dnorm + norm * "
                               "dnorm_norm_mean)")
    assert flipped != solution
    verdict = lesson02.check_v1_kernel(flipped, sanitize=False)
    assert verdict.status == ("NOT YET" if twin.available() is None else "NOT VERIFIED"), verdict
    capsys.readouterr()
    notebook.compare_with_ours(verdict, "v1_naive")
    shown = capsys.readouterr().out
    ours = [ln.strip() for ln in build.kernel_source("v1_naive").splitlines()
            if len(ln.strip()) >= 12]
    assert not [ln for ln in ours if ln in shown], shown


def test_the_widgets_wait_in_the_explore_tail():
    all_cells = cells(STEM)
    explore = next(i for i, c in enumerate(all_cells) if text(c).startswith("## Explore"))
    assert "What to take away" in text(all_cells[explore - 1])
    widgets = [i for i, c in enumerate(all_cells) if "rl.widgets." in text(c)]
    assert widgets and all(i > explore for i in widgets)
    assert not any("Traceback" in outputs(c) for c in all_cells)


# --- the atomics and the sectors of v1 (the exercises) --------------------------------------------


def test_lesson02_atomics():
    assert lesson02.check_atomics(8192, 1024, 8192 * 1024, 8192)
    assert lesson02.check_atomics(7, 13, 91.0, 7)
    wrong = lesson02.check_atomics(8192, 1024, 8192, 1024)
    assert not wrong and "one atomic per row" in wrong.message and "count rows" in wrong.message
    assert not lesson02.check_atomics(8192, 1024, 8192 * 1024, 8192 * 1024)
    assert "replace the ..." in lesson02.check_atomics(8192, 1024, ..., ...).message
    assert "whole number" in lesson02.check_atomics(8192, 1024, 1.5, 8192).message


def test_lesson02_sectors():
    assert lesson02.check_sectors(32, 4)
    wrong = lesson02.check_sectors(4, 32)
    assert not wrong and "a whole row apart" in wrong.message and "share sectors" in wrong.message
    assert not lesson02.check_sectors(32, 1)
    assert not lesson02.check_sectors(1, 4)


# --- round 2: the opening shows the saved run without a GPU, and meets the guess ---------------

def test_the_opening_cell_is_no_gpu_cell_and_sets_the_guess_beside_v1s_time():
    all_cells = cells(STEM)
    [opening] = tagged(all_cells, "opening")
    source = text(all_cells[opening])
    assert "rl.predict.versus(mine_v1" in source and not source.startswith("%%gpu")
    assert "02.v1_ms" in outputs(all_cells[opening])
    # the student edition clears it: it answers the prediction above it
    from rmsnorm_lessons.course import student as st

    assert opening in st.answered_below(all_cells)
