"""Lesson 03 (CPU): v1 diagnosed from its profile, the butterfly and the lanes' columns decided
and simulated, v2 written whole (the warp sum inline), the REDG question (issue 41), and the
butterfly's figure."""
import ast

import numpy as np
import pytest
from _lesson_support import cells, investigation_order, shown_above, tagged, text
from matplotlib.figure import Figure

from rmsnorm_lessons.core import build, gpu
from rmsnorm_lessons.course import student
from rmsnorm_lessons.lessons import lesson03

STEM = "03_warp_per_row"


def strided(lane, C):
    return range(lane, C, 32)


@pytest.fixture
def saved(monkeypatch):
    monkeypatch.setattr(gpu, "why_unavailable", lambda: "hidden by the test: saved run")
    monkeypatch.setattr(lesson03, "_OPENINGS", {})
    return lesson03.opening()


# --- the diagnosis -------------------------------------------------------------------------------

def test_the_intended_diagnosis_passes_on_the_saved_opening(saved):
    assert (saved.version, saved.shape) == ("v1_naive", (8192, 1024))
    verdict = lesson03.check_diagnosis("latency", "few_threads", "occupancy_pct",
                                       saved.figure("occupancy_pct"))
    assert verdict.passed and "goes after it" in verdict.message, verdict


def test_a_true_cause_v2_keeps_is_not_yet_and_says_so(saved):
    verdict = lesson03.check_diagnosis("latency", "few_loads_in_flight", "stall:long_scoreboard",
                                       saved.figure("stall:long_scoreboard"))
    assert verdict.status == "NOT YET" and "leaves it" in verdict.message, verdict


@pytest.mark.parametrize("answer,why", [
    (("memory", "few_threads", "occupancy_pct", "occupancy_pct"), "memory-bound means"),
    (("latency", "uncoalesced", "occupancy_pct", "occupancy_pct"), "does not show"),
    (("latency", "dram_bandwidth", "dram_pct", "dram_pct"), "under the 60 % line"),
    (("latency", "global_atomics", "stall:long_scoreboard", "stall:long_scoreboard"),
     "fire-and-forget"),
    (("latency", "few_threads", "occupancy_pct", 92.0), "you read occupancy_pct"),
    (("latency", "slow", "occupancy_pct", "occupancy_pct"), "the cause"),
])
def test_each_likely_wrong_diagnosis_says_why(saved, answer, why):
    bound, cause, metric, value = answer
    value = saved.figure(value) if isinstance(value, str) else value
    verdict = lesson03.check_diagnosis(bound, cause, metric, value)
    assert verdict.status == "NOT YET" and why in verdict.message, verdict


# --- the decision --------------------------------------------------------------------------------

@pytest.mark.parametrize("offsets,columns", [
    ((16, 8, 4, 2, 1), strided), ((1, 2, 4, 8, 16), strided),
    ((1, 3, 4, 8, 16), strided),  # any five offsets that together name every lane
    ((16, 8, 4, 2, 1), lambda lane, C: range(C - 1 - lane, -1, -32)),  # backwards, still whole
    (np.array([16, 8, 4, 2, 1]), lambda lane, C: list(range(lane, C, 32))),
])
def test_the_right_design_passes(offsets, columns):
    verdict = lesson03.check_butterfly(offsets, columns)
    assert verdict.passed and "496" in verdict.message and "4 sectors" in verdict.message, verdict


@pytest.mark.parametrize("offsets,columns,why", [
    ((16, 8, 4, 2), strided, "only 16 lanes' numbers"),
    ((16, 8, 4, 2, 1, 1), strided, "offset 1 comes twice"),
    ((1, 2, 3, 8, 16), strided, "counted twice"),
    ((), strided, "no exchange"),
    ((16, 8, 4, 2, 0), strided, "offset 0 is no lane distance"),
    ((16, 8, 4, 2, 32), strided, "offset 32 is no lane distance"),
    ((16, 8, 4, 2, 1), lambda lane, C: range(lane * -(-C // 32), min(C, (lane + 1) * -(-C // 32))),
     "32 sectors"),
    ((16, 8, 4, 2, 1), lambda lane, C: range(lane, C - C % 32, 32), "no lane visits column 992"),
    ((16, 8, 4, 2, 1), lambda lane, C: range(lane, C + 1, 32), "outside the row"),
    ((16, 8, 4, 2, 1), lambda lane, C: range(lane % 16, C, 16), "visited by lane"),
    ((16, 8, 4, 2, 1), lambda lane: range(lane), "raised TypeError"),
    ((16, 8, 4, 2, 1), lambda lane, C: None, "returns None"),
    ((16, 8, 4, 2, 1), ..., "replace lane_columns"),
    (..., strided, "replace the ..."),
    ("16 8 4 2 1", strided, "whole numbers"),
])
def test_each_likely_wrong_design_says_why(offsets, columns, why):
    verdict = lesson03.check_butterfly(offsets, columns)
    assert verdict.status == "NOT YET" and why in verdict.message, verdict


def test_the_consequence_is_drawn_from_the_learners_own_answer(capsys):
    assert isinstance(lesson03.design_picture((16, 8, 4, 2, 1), strided), Figure)
    assert isinstance(lesson03.design_picture((16, 8, 4, 2), lambda lane, C: [lane]), Figure)
    assert lesson03.design_picture(..., ...) is None
    assert "Nothing to draw yet" in capsys.readouterr().out
    assert isinstance(lesson03.butterfly(offsets=(), highlight=None), Figure)


def test_no_answer_of_the_decision_is_shown_above_it():
    all_cells = cells(STEM)
    [decision] = [i for i in tagged(all_cells, "decision") if "BEGIN SOLUTION" in
                  text(all_cells[i])]
    above = shown_above(all_cells, decision)
    for answer in ("16, 8, 4, 2, 1", "offset > 0", "c += WARP_SIZE", "lane + 32", "32*s + l"):
        assert answer not in above, answer


# --- the kernel exercise and the question --------------------------------------------------------

def _exercise_text():
    [at] = tagged(cells(STEM), "kernel-exercise")
    return at, ast.parse(text(cells(STEM)[at])).body[0].value.value


def test_v2_is_written_whole_with_its_butterfly():
    at, solution = _exercise_text()
    skeleton = student.strip_solutions(solution)
    body = skeleton[skeleton.index("{") + 1:skeleton.rindex("}")]
    assert all(line.strip().startswith("// TODO") for line in body.splitlines() if line.strip())
    written = [ln for ln in student.solution_lines(solution) if ln.strip()]
    assert len(written) >= 20 and any("__shfl_xor_sync" in ln for ln in written)
    above = shown_above(cells(STEM), at)
    leaked = [ln.strip() for ln in written if len(ln.strip()) >= 12 and ln.strip() in above]
    assert not leaked, leaked


@pytest.mark.skipif(build.find_nvcc() is None, reason="nvcc not found")
def test_the_skeleton_is_not_yet_without_a_gpu(monkeypatch):
    monkeypatch.setattr(gpu, "why_unavailable", lambda: "hidden by the test")
    _, solution = _exercise_text()
    assert lesson03.check_v2_kernel(student.strip_solutions(solution),
                                    sanitize=False).status == "NOT YET"


def test_the_redg_question():
    assert lesson03.check_v2_redg(16384, 2048, 16384 * 2048 // 32, 4).passed
    assert lesson03.check_v2_redg(1000, 100, 1000 * 4, 4).passed  # a partial last step counts
    for answer, why in (((16384 * 2048, 4), "counts the adds"), ((16384, 4), "more than one"),
                        ((1048576, 32), "v1's pattern"), ((1048576, 1), "128 bytes"),
                        ((1048576, 128), "128 is bytes"), ((None, 4), "replace None")):
        verdict = lesson03.check_v2_redg(16384, 2048, *answer)
        assert verdict.status == "NOT YET" and why in verdict.message, verdict


def test_the_lesson_diagnoses_before_it_explains():
    investigation_order(STEM)
    all_cells = cells(STEM)
    [diagnosis] = tagged(all_cells, "diagnosis")
    above = "\n".join(text(c) for c in all_cells[:diagnosis] if c["cell_type"] == "markdown")
    for cause in ("coalesc", "too few threads", "atomics on", "a sector per lane"):
        assert cause not in above.lower(), cause


# --- the butterfly's figure -----------------------------------------------------------------------


@pytest.mark.parametrize("offsets,highlight",
                         [((16, 8, 4, 2, 1), 0), ((16, 8, 4, 2), 5), ((1, 2, 4, 8, 16), None)])
def test_butterfly_figure(offsets, highlight):
    assert isinstance(lesson03.butterfly(offsets, highlight), Figure)


# --- round 2 (the walk-through of 2026-12): what a learner without a GPU met ----------------------

BLOCKED = ("for (int c = lane * ((C + 31) / 32); c < min(C, (lane + 1) * ((C + 31) / 32)); "
           "c++)")


@pytest.mark.skipif(build.find_nvcc() is None, reason="nvcc not found")
def test_a_v2_whose_lanes_each_read_a_block_of_columns_is_not_yet(monkeypatch):
    from rmsnorm_lessons import twin

    if twin.available() is not None:
        pytest.skip(twin.available())
    monkeypatch.setattr(gpu, "why_unavailable", lambda: "hidden by the test")
    _, solution = _exercise_text()
    strided = "for (int c = lane; c < C; c += WARP_SIZE)"
    assert solution.count(strided) == 2
    right = lesson03.check_v2_kernel(solution, sanitize=False)
    assert right.passed and "touches the fewest 32-byte sectors" in right.message, right
    blocked = lesson03.check_v2_kernel(solution.replace(strided, BLOCKED), sanitize=False)
    assert blocked.status == "NOT YET", blocked
    assert "not coalesced" in blocked.message and "32 sectors" in blocked.message, blocked
    assert "numbers were right" in blocked.message, blocked


def test_a_misread_figure_is_not_given_away(saved):
    shown = saved.figure("occupancy_pct")
    verdict = lesson03.check_diagnosis("latency", "few_threads", "occupancy_pct", 10)
    assert verdict.status == "NOT YET" and "'achieved occupancy'" in verdict.message, verdict
    assert f"{shown:g}" not in verdict.message and f"{shown:.0f}" not in verdict.message, verdict


def test_a_cause_the_saved_run_cannot_show_is_not_verified(saved):
    if saved.figure("load_efficiency_pct") is not None:
        pytest.skip("the saved run measured it: the diagnosis is judged")
    verdict = lesson03.check_diagnosis("latency", "uncoalesced", "load_efficiency_pct", 12.5)
    assert verdict.status == "NOT VERIFIED" and "run the opening on a GPU" in verdict.message


def test_the_opening_and_what_changed_show_the_saved_run_and_the_guess_is_compared():
    all_cells = cells(STEM)
    [changed] = tagged(all_cells, "what-changed")
    assert "rl.predict.versus(mine_v2" in text(all_cells[changed])
    core = all_cells[:next(i for i, c in enumerate(all_cells)
                           if text(c).startswith("## Explore"))]
    # no core cell waits for a GPU: the sweep and the small-N question are in the Explore tail
    assert not [text(c)[:40] for c in core if "gpu" in c.get("metadata", {}).get("tags", [])]
    assert not any("check_small_n" in text(c) for c in core)


# --- round 3 (the walk-through of 2026-12-06): messages that told a wrong reason ------------------

@pytest.mark.skipif(build.find_nvcc() is None, reason="nvcc not found")
def test_a_mean_taken_before_the_butterfly_says_the_compiler_removed_the_shuffles(monkeypatch):
    from rmsnorm_lessons import twin

    if twin.available() is not None:
        pytest.skip(twin.available())
    monkeypatch.setattr(gpu, "why_unavailable", lambda: "hidden by the test")
    _, solution = _exercise_text()
    mean = ("    const float dnorm_norm_mean = partial * r / C;  // rstd factored out of the loop "
            "above\n")
    butterfly = "    for (int offset = 16; offset > 0; offset /= 2) {"
    assert solution.count(mean) == 1 and solution.count(butterfly) == 1
    early = solution.replace(mean, "").replace(butterfly, mean + butterfly)
    verdict = lesson03.check_v2_kernel(early, sanitize=False)
    assert verdict.status == "NOT YET", verdict
    assert "compiler removed the shuffles" in verdict.message, verdict
    assert "never used" in verdict.message and "0 SHFL.BFLY" not in verdict.message, verdict
