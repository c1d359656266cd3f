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
