"""Lesson 06 (v4's bank conflicts, its tolerance, cache hints), on the CPU: the slot decision passes
any conflict-free permutation and says what is wrong with the likely slips, its picture draws a
learner's slot, the streaming-store question compiles the learner's line into v4 and reads its
SASS, the tolerance question follows the table's error, the kernel check asks for the hints, and
the notebook's order."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from matplotlib.figure import Figure

from rmsnorm_lessons.core import build, ladder
from rmsnorm_lessons.course import registry, student
from rmsnorm_lessons.lessons import lesson06

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "06_vectorized.ipynb"
needs_nvcc = pytest.mark.skipif(build.find_nvcc() is None, reason="nvcc not found")


def planar(c, C):
    return (c % 8) * (C // 8) + c // 8


# --- the decision: where channel c lives --------------------------------------------------------

def test_any_conflict_free_permutation_passes():
    assert lesson06.check_slot(planar).passed
    # the same planes in the other order of k: also 32 banks for every add
    assert lesson06.check_slot(lambda c, C: (7 - c % 8) * (C // 8) + c // 8).passed
    assert "ours, the planar slot" in lesson06.check_slot(
        lambda c, C: (7 - c % 8) * (C // 8) + c // 8).message
    assert "ours" not in lesson06.check_slot(planar).message


@pytest.mark.parametrize("slot, says", [
    (lambda c, C: c, "8-way conflict (slot c"),
    (lambda c, C: c % 8 * 32 + c // 8, "at C = 256 only"),
    (lambda c, C: c // 8, "share slot 0"),
    (lambda c, C: c + 1, "outside 0 .. 7"),
    (lambda c, C: c ^ ((c // 8) % 8), "4-way conflict"),
    (lambda c, C: ..., "give a slot"),
    (lambda c, C: [c], "give a slot"),
    (lambda c: c, "TypeError"),
    (5, "must be a function"),
    (..., "replace the ..."),
])
def test_a_wrong_slot_says_what_is_wrong(slot, says):
    verdict = lesson06.check_slot(slot)
    assert verdict.status == "NOT YET" and says in verdict.message, verdict.message


def test_the_conflict_is_counted_per_add_as_the_rung_counts_it():
    for C in (776, 1024, 2048):
        slots = np.array([planar(c, C) for c in range(C)])
        assert lesson06.worst_conflict(slots, C)[0] == 1
        assert lesson06.worst_conflict(np.arange(C), C)[0] == \
            ladder.v4_vec_bf16.conflict_degree(C, 0, interleaved=True) == 8
    assert lesson06.planar(19, 2048) == int(ladder.v4_vec_bf16.staged(19, 2048)) == 770


def test_the_banks_picture_draws_a_learners_slot():
    fig = lesson06.v4_staging_banks(C=2048, k=3, slots=("interleaved", planar))
    assert isinstance(fig, Figure) and len(fig.axes) == 2
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == ["interleaved: slot c\n8-way conflict", "your slot\nno conflict"]
    assert len(lesson06.v4_staging_banks(C=2048, slots=("interleaved",)).axes) == 1


# --- the kernel exercise: the hints are asked for -----------------------------------------------

def test_the_kernel_check_asks_for_the_hints_and_the_slot(monkeypatch):
    from rmsnorm_lessons.course.checking import kernel as kc

    seen = {}
    monkeypatch.setattr(kc, "check_kernel", lambda source, **kw: seen.update(kw) or "checked")
    assert lesson06.check_v4_kernel("text") == "checked"
    what = " ".join(s.what for s in seen["static"])
    assert "LDG.E.EF.128" in what and "cache hint" in what and "staged() is not" in what
    assert seen["like"] == "v4_vec_bf16"


# --- the questions ------------------------------------------------------------------------------

@needs_nvcc
@pytest.mark.parametrize("line, status, says", [
    ("store128cs(dinp_row + c, d);", "PASS", "STG.E.EF.128"),
    ("__stcs(reinterpret_cast<int4*>(dinp_row + c), *reinterpret_cast<int4*>(&d));", "PASS",
     "evict first"),
    ("store128(dinp_row + c, d);", "NOT YET", "plain 128-bit store"),
    ("store128cg(dinp_row + c, d);", "NOT YET", "cache-global"),
    ("__stcs(dinp_row + c, d);", "NOT YET", "a Packed128 is neither"),
])
def test_the_streaming_store_is_judged_by_its_sass(line, status, says):
    verdict = lesson06.check_streaming_store(line)
    assert verdict.status == status and says in verdict.message, verdict.message


@pytest.mark.parametrize("line, says", [(None, "replace None"), (3, "as a string"),
                                        ("store128cs(dinp_row + c, d)", "ending with ';'"),
                                        ("a;\nb;", "one statement on one line")])
def test_the_streaming_store_asks_for_one_line(line, says):
    verdict = lesson06.check_streaming_store(line)
    assert verdict.status == "NOT YET" and says in verdict.message, verdict.message


def test_the_store_line_is_still_in_v4():
    assert build.kernel_source("v4_vec_bf16").count(lesson06.STORE_LINE) == 1


def test_the_tolerance_question_follows_the_tables_error():
    err = 0.4295
    want = 8192 * (0.5 / err) ** 2
    assert lesson06.check_tolerance_n(want, err=err).passed
    assert lesson06.check_tolerance_n(round(want), err=err).passed
    assert lesson06.check_tolerance_n(8192 * (0.5 / 0.3) ** 2, err=0.3).passed
    for wrong, says in [(8192 * 0.5 / err, "random walk"), (4000, "above 8192"),
                        (50000, "solve"), (None, "replace None")]:
        verdict = lesson06.check_tolerance_n(wrong, err=err)
        assert verdict.status == "NOT YET" and says in verdict.message, verdict.message
    with pytest.raises(ValueError, match="err must be the table's error"):
        lesson06.check_tolerance_n(1, err=0.7)


@pytest.mark.parametrize("check, right, wrong, says", [
    (lesson06.check_planar_slot, 770, 19, "interleaved"),
    (lesson06.check_planar_slot, 770, 2 * 256 + 3, "swapped"),
    (lesson06.check_four_wide_conflict, 4, 8, "v4's case"),
    (lesson06.check_four_wide_conflict, 4.0, 1, "stride"),
])
def test_the_slot_questions(check, right, wrong, says):
    assert check(right).passed
    verdict = check(wrong)
    assert verdict.status == "NOT YET" and says in verdict.message, verdict.message
    assert "replace None" in check(None).message


# --- the notebook -------------------------------------------------------------------------------

def _cells():
    return json.loads(NOTEBOOK.read_text())["cells"]


def _index(cells, tag):
    return [i for i, c in enumerate(cells) if tag in c.get("metadata", {}).get("tags", [])]


def test_the_lesson_measures_diagnoses_decides_writes_and_measures_again():
    cells = _cells()
    [opening], [diagnosis], [decision], [exercise] = (
        _index(cells, t) for t in ("opening", "diagnosis", "decision", "kernel-exercise"))
    [changed] = _index(cells, "what-changed")
    assert opening < diagnosis < _index(cells, "explanation")[0] < decision < exercise < changed
    above = " ".join("".join(c["source"]) for c in cells[:diagnosis]
                     if c["cell_type"] == "markdown")
    assert "conflict" not in above.split("What you will be able to do")[0]
    # the planar slot is not given before the learner decides it
    before = "".join("".join(c["source"]) for c in cells[:decision])
    assert "k * (C / 8) + q" not in before and "staged(" not in before


def test_the_exercise_leaves_the_slot_and_the_hints_to_the_learner():
    cells = _cells()
    [exercise] = _index(cells, "kernel-exercise")
    text = "".join(cells[exercise]["source"])
    skeleton = student.strip_solutions(text)
    for answer in ("load128cs(", "store128cg(", "(c % x128::size) * (C / x128::size)",
                   "dweight_shared[staged("):
        assert answer not in skeleton, answer
    hints = "".join("".join(c["source"]) for c in cells[:exercise] if c["cell_type"] == "markdown")
    assert "__ldcs" in hints and "__stcg" in hints
    assert "second read is the last" not in hints, "what a hint asks, not where it goes"


def test_the_registry_row_follows_the_notebook():
    lesson = registry.by_stem("06_vectorized")
    assert lesson.exercises[:3] == ("lesson06.check_diagnosis", "lesson06.check_slot",
                                    "lesson06.check_v4_kernel")
    assert lesson.minutes <= 75 and lesson.rung == "v4_vec_bf16"


@needs_nvcc
def test_the_last_reads_without_a_hint_are_not_yet_without_a_gpu():
    import ast

    [cell] = [c for c in _cells() if "kernel-exercise" in c["metadata"].get("tags", [])]
    text = ast.parse("".join(cell["source"])).body[0].value.value
    assert text.count("x128 g = load128cs(dout_row + c);") == 1
    verdict = lesson06.check_v4_kernel(text.replace("x128 g = load128cs(dout_row + c);",
                                                    "x128 g = load128(dout_row + c);"))
    assert verdict.status == "NOT YET" and "evict" in verdict.message
    assert "expected at least 2" in verdict.message


# --- round 2 of issue 41: what the learner walk-through of 2026-12 found -----------------------

from _lesson_support import (  # noqa: E402
    core, kernel_solution, opening_and_change_without_a_gpu, outputs, tagged, text)

from rmsnorm_lessons import twin  # noqa: E402
from rmsnorm_lessons.course import investigate  # noqa: E402
from rmsnorm_lessons.course import diagnose as dg  # noqa: E402
from rmsnorm_lessons.inspection import nsight  # noqa: E402
from rmsnorm_lessons.speed import bench  # noqa: E402

needs_twin = pytest.mark.skipif(build.find_nvcc() is None or twin.available() is not None,
                                reason="nvcc or the CPU twin (g++ on Linux) not here")


@pytest.fixture
def no_gpu(monkeypatch):
    """Openings as a machine without a GPU shows them: the saved run's."""
    monkeypatch.setattr(investigate, "why_not_measured", lambda: "no GPU here")
    monkeypatch.setattr(lesson06, "_SEEN", {})


def _solution():
    return kernel_solution("06_vectorized")


def test_the_opening_and_what_changed_run_without_a_gpu():
    opening_and_change_without_a_gpu("06_vectorized")


def test_the_saved_runs_missing_figures_make_the_diagnosis_not_verified(no_gpu):
    seen = lesson06.measured()
    shown = seen.figure("bank_conflicts_per_wavefront")
    verdict = lesson06.check_diagnosis("latency", "bank_conflicts",
                                       "bank_conflicts_per_wavefront", shown or 7)
    if shown is None or seen.profile.dram_pct is None:  # the H100 run of 2026-12-05: times only
        assert verdict.status == "NOT VERIFIED", verdict
        assert "bank conflicts / wavefront" in verdict.message or "DRAM" in verdict.message
        for guess in (("memory", "dram_bandwidth", "dram_pct", 30),
                      ("latency", "bank_conflicts", "stall:short_scoreboard", 30)):
            assert lesson06.check_diagnosis(*guess).status == "NOT VERIFIED", guess
    else:  # a saved run that measured the profile (the lead's GPU run): it passes
        assert verdict.passed, verdict
    # what the names alone refute is refused, whatever the opening measured
    wrong = lesson06.check_diagnosis("latency", "bank_conflicts", "time_ms", 0.28)
    assert wrong.status == "NOT YET" and "does not show that" in wrong.message


def test_the_diagnosis_passes_once_the_opening_has_the_profile():
    """What the lead's GPU run saves (made-up figures of the shape the run measures)."""
    p = nsight.Profile("v4_interleaved", "k", (16384, 2048), 32.0, 48.0, 270.0,
                       {"long_scoreboard": 5.0, "short_scoreboard": 2.0, "mio_throttle": 1.0},
                       bank_conflicts=7e6, shared_wavefronts=8e6)
    t = bench._timing("v4_interleaved", 16384, 2048, [0.27] * 3, 8 * 16384 * 2048, 3000.0)
    made_up = investigate.Opening("v4_interleaved", (16384, 2048), None, t, p, {}, {},
                                  "measured now on a made-up GPU")
    verdict = lesson06.check_diagnosis("latency", "bank_conflicts",
                                       "bank_conflicts_per_wavefront", 7, against=made_up)
    assert verdict.passed and "goes after it" in verdict.message, verdict
    wrong = lesson06.check_diagnosis("memory", "bank_conflicts", "bank_conflicts_per_wavefront",
                                     7, against=made_up)
    assert wrong.status == "NOT YET" and "32" not in wrong.message
    assert dg.DRAM_BUSY_PCT > 32


def test_nothing_under_the_diagnosis_shows_the_conflict_before_the_decision():
    cells = _cells()
    [diagnosis], [decision] = tagged(cells, "diagnosis"), tagged(cells, "decision")
    between = [c for c in cells[diagnosis + 1:decision] if c["cell_type"] == "code"]
    assert not between, [text(c)[:60] for c in between]
    kept = "".join(text(c) for c in core(cells))
    assert "ATOMS.CAST" not in "".join(outputs(c) for c in core(cells))
    assert "check_tolerance_n" not in kept and "seed_check" not in kept, "the tolerances: Explore"


@needs_twin
@pytest.mark.parametrize("layout", ["C - 1 - c", "(c + 1) % C"])
def test_a_slot_that_keeps_the_conflict_is_not_yet(layout):
    old = "return (c % x128::size) * (C / x128::size) + c / x128::size;"
    text_ = _solution()
    assert text_.count(old) == 1
    verdict = lesson06.check_v4_kernel(text_.replace(old, f"return {layout};"))
    assert verdict.status == "NOT YET" and "8-way bank conflict" in verdict.message, verdict


@needs_twin
def test_a_layout_written_beside_staged_is_not_yet():
    text_ = _solution().replace("dweight_shared[staged(c + k, C)]", "dweight_shared[c + k]")
    text_ = text_.replace("dweight_shared[staged(c, C)]", "dweight_shared[c]")
    verdict = lesson06.check_v4_kernel(text_)
    assert verdict.status == "NOT YET" and "does not go through staged()" in verdict.message


def test_the_index_expressions_are_found_in_both_forms():
    from rmsnorm_lessons.lessons import probe

    code = ("zero_block_shared(d, C);\nx = d[staged(c + k, C)];\natomicAdd(d + s, v);\n"
            "int s = staged(c, C);\nfloat y[];\n")
    assert probe.index_expressions(code, "d") == [(2, "staged(c + k, C)"), (3, "s")]
    assert probe.through(code, "s", "staged") and not probe.through(code, "c + k", "staged")


def test_the_learner_writes_the_second_loop_and_the_flush():
    cells = _cells()
    [exercise] = tagged(cells, "kernel-exercise")
    counted = [ln for ln in student.solution_lines(text(cells[exercise]))
               if ln.strip() and not ln.strip().startswith("//")]
    assert len(counted) >= 15, "staged(), the second loop's body and the flush: your draft's"
    skeleton = student.strip_solutions(text(cells[exercise]))
    assert "load128(dinp_row" not in skeleton and "dweight_accum[c]" not in skeleton.split(
        "add_dweight_v4")[0]


# --- Q3 judges the store's address and value, not only its instruction (walk-through 2) --------

@needs_twin
@pytest.mark.parametrize("line, says", [
    ("store128cs(dinp_row, d);", "address"),
    ("store128cs(dinp + c, d);", "address"),
    ("store128cs(dinp_row + lane, d);", "not a multiple of 16"),
    ("store128cs(dinp_row + c, g);", "its value is not"),
])
def test_the_streaming_store_with_a_wrong_address_or_value_is_not_yet(line, says):
    verdict = lesson06.check_streaming_store(line)
    assert verdict.status == "NOT YET" and says in verdict.message, verdict.message
    assert "STG.E.EF.128" in verdict.message, "it says the instruction itself was right"
    assert "dinp_row + c, d" not in verdict.message, "the reason does not give the answer"
    right = lesson06.check_streaming_store("store128cs(dinp_row + c, d);")
    assert right.passed and "CPU twin" in right.message, right.message


def test_the_streaming_store_is_one_statement():
    verdict = lesson06.check_streaming_store("store128cs(dinp_row + c, d); "
                                             "store128cs(dinp_row + c, d);")
    assert verdict.status == "NOT YET" and "one statement" in verdict.message, verdict.message


# --- round 3 (the walk-through of 2026-12-06): a PASS that named the wrong loads ------------------

@needs_twin
def test_evict_first_loads_on_weight_are_not_yet_and_the_solution_still_passes(monkeypatch):
    from rmsnorm_lessons.core import gpu

    monkeypatch.setattr(gpu, "why_unavailable", lambda: "hidden by the test")
    text_ = _solution()
    plain, hinted = "x128 w = load128(weight + c)", "x128 w = load128cs(weight + c)"
    assert text_.count(plain) == 1 and text_.count("x128 g = load128cs(dout_row + c);") == 1
    right = lesson06.check_v4_kernel(text_, sanitize=False)
    assert right.passed, right
    assert ("two evict-first 128-bit loads (LDG.E.EF.128) of dout and inp in the second loop"
            in right.message), right
    for dout in ("load128", "load128cs"):  # weight and inp hinted, dout plain; all three hinted
        wrong = text_.replace(plain, hinted).replace("x128 g = load128cs(dout_row + c);",
                                                     f"x128 g = {dout}(dout_row + c);")
        verdict = lesson06.check_v4_kernel(wrong, sanitize=False)
        assert verdict.status == "NOT YET", verdict
        assert "weight is loaded evict-first" in verdict.message, verdict
