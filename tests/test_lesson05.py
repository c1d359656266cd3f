"""Lesson 05 (bf16 storage and 128-bit loads: v4, a first draft), on the CPU: the decision's check
passes the right layout and says what is wrong with each likely wrong one, its picture draws any
mapping (and nothing, saying so, before the decision is written), the draft's check is the engine's
with v4's plan and the first draft's layout beside it, the questions, and the notebook's order:
measure, diagnose, explain, decide, write, measure again; bf16's rounding (ties to even) and its
half spacing, as ml_dtypes rounds, and the error histogram."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from _lesson_support import small_figure as _small
from matplotlib.figure import Figure

from rmsnorm_lessons.core import bf16, build
from rmsnorm_lessons.course import registry, student
from rmsnorm_lessons.lessons import lesson05

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "05_bf16.ipynb"


def right(lane, step):
    return 8 * lane + 256 * step


def aligned(C):
    return C % 8 == 0


# --- the decision: what one lane loads ----------------------------------------------------------

def test_the_layout_passes_and_says_what_it_costs():
    verdict = lesson05.check_v4_layout(8, right, aligned)
    assert verdict.passed, verdict
    assert "16 sectors" in verdict.message and "4 steps where v3 took 32" in verdict.message
    # the warp's 32 loads in another order are still 512 neighbouring bytes
    assert lesson05.check_v4_layout(8.0, lambda lane, step: 8 * (31 - lane) + 256 * step,
                                    lambda C: not C % 8).passed


@pytest.mark.parametrize("values, first, rule, says", [
    (4, right, aligned, "4-byte float"),
    (16, right, aligned, "widest load"),
    (2, right, aligned, "32-bit load"),
    (None, right, aligned, "replace None of values"),
    (8, lambda lane, step: lane + 32 * step, aligned, "v3's mapping"),
    (8, lambda lane, step: 8 * lane + 32 * step, aligned, "moves on by 256"),
    (8, lambda lane, step: 8 * (8 * lane + step), aligned, "not side by side"),
    (8, lambda lane, step: 4 + 8 * lane + 256 * step, aligned, "not a multiple of 8"),
    (8, lambda lane, step: 8 * (lane % 16) + 256 * step, aligned, "two lanes load the same"),
    (8, lambda lane, step: ..., aligned, "replace the ... in first_channel"),
    (8, lambda lane, step: 1 / 0, aligned, "ZeroDivisionError"),
    (8, "8 * lane", aligned, "must be a function"),
    (8, right, lambda C: True, "c_rule(1) is True"),
    (8, right, lambda C: C % 16 == 0, "c_rule(776) is False"),
    (8, right, lambda C: C % 4 == 0, "c_rule(4) is True"),
    (8, right, lambda C: C % 256 == 0, "row loop's bound"),
    (8, right, lambda C: ..., "replace the ... in c_rule"),
    (8, right, ..., "replace the ... of c_rule"),
])
def test_a_wrong_layout_says_what_is_wrong(values, first, rule, says):
    verdict = lesson05.check_v4_layout(values, first, rule)
    assert verdict.status == "NOT YET" and says in verdict.message, verdict.message


def test_sectors_are_counted_from_the_bytes():
    assert lesson05.sector_count(8 * np.arange(32)) == 16  # 512 neighbouring bytes
    assert lesson05.sector_count(8 * np.arange(32) * 2) == 32  # one load in every other sector
    assert lesson05.sector_count([4]) == 1 and lesson05.sector_count([12]) == 2  # straddles


def test_the_picture_draws_any_mapping_and_nothing_before_the_decision(capsys):
    fig = lesson05.lane_loads(right)
    assert isinstance(fig, Figure)
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels == ["step 0: 16 sectors", "step 1: 16 sectors"]
    assert lesson05.lane_loads(lambda lane, step: 8 * (8 * lane + step)) is not None
    assert lesson05.lane_loads(lambda lane, step: ...) is None
    assert lesson05.lane_loads(...) is None
    assert capsys.readouterr().out.count("No picture") == 2


# --- the kernel exercise's check ----------------------------------------------------------------

def test_the_draft_is_checked_like_v4_and_timed_beside_the_first_draft(monkeypatch):
    from rmsnorm_lessons.course.checking import kernel as kc

    seen = {}
    monkeypatch.setattr(kc, "check_kernel", lambda source, **kw: seen.update(kw) or "checked")
    assert lesson05.check_v4_draft("text") == "checked"
    assert seen["like"] == "v4_vec_bf16" and seen["compare_with"] == "v4_interleaved"
    assert "same slot" in seen["hints"]["dweight wrong"]
    found = {s.what.split(" (")[0].split(":")[0] for s in seen["static"]}
    assert {"two barriers", "a shared-memory atomic", "a global atomic",
            "no row access narrower than 128 bits"} <= found
    # the draft's check asks for neither the hints nor a slot: those are lesson 06's
    assert not any("EF" in s.what or "staged" in s.what for s in seen["static"])


# --- the questions ------------------------------------------------------------------------------

def _stalled_sum(add=1.0, times=1000):
    total = bf16.to_bf16(np.float32(0.0))
    for _ in range(times):
        total = bf16.to_bf16(np.float32(bf16.from_bf16(total)) + np.float32(add))
    return float(bf16.from_bf16(total))


@pytest.mark.parametrize("check, right_answer, wrong, says", [
    (lesson05.check_sum_stalls, _stalled_sum(), 1000, "exact sum"),
    (lesson05.check_sum_stalls, 256.0, 257, "tie"),
    (lesson05.check_range, "b", "a", "largest finite"),
    (lesson05.check_range, " B ", "c", "exponent bits"),
])
def test_a_question_passes_its_answer_and_says_why_not(check, right_answer, wrong, says):
    assert check(right_answer).passed, check(right_answer)
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
    [opening], [diagnosis], [decision], [exercise], [check] = (
        _index(cells, t) for t in ("opening", "diagnosis", "decision", "kernel-exercise",
                                   "exercise-check"))
    [changed] = _index(cells, "what-changed")
    explained = _index(cells, "explanation")
    assert opening < diagnosis < explained[0] < decision < exercise < check < changed
    assert explained[-1] > changed, "what the change shows is told after the table"
    src = "".join(cells[opening]["source"])
    assert "lesson05.opening()" in src and not src.startswith("%%gpu")
    assert "lesson05.opening(after=True)" in "".join(cells[changed]["source"])
    # nothing above the diagnosis names v3's cause
    above = " ".join("".join(c["source"]) for c in cells[:diagnosis]
                     if c["cell_type"] == "markdown")
    assert "long_scoreboard" not in above and "latency-bound" not in above


def test_the_decision_and_the_exercise_are_not_spelled_out_above_them():
    cells = _cells()
    [decision], [exercise] = _index(cells, "decision"), _index(cells, "kernel-exercise")
    above = "".join("".join(c["source"]) for c in cells[:decision])
    assert "8 * lane + 256 * step" not in above and "C % 8 == 0" not in above
    text = "".join(cells[exercise]["source"])
    for line in student.solution_lines(text):
        if len(line.strip()) >= 12:
            assert not any(line.strip() in "".join(c["source"]) for c in cells[:exercise]), line
    skeleton = student.strip_solutions(text)
    assert "load128(dout_row" not in skeleton and "__float2bfloat16" not in skeleton
    counted = [ln for ln in student.solution_lines(text)
               if ln.strip() and not ln.strip().startswith("//")]
    assert len(counted) >= 20, "a first draft of 20 lines or more, from its signature"


def test_the_registry_row_follows_the_notebook():
    lesson = registry.by_stem("05_bf16")
    assert lesson.kernel_exercise == "lesson05.check_v4_draft" and lesson.rung is None
    # its minutes: tests/test_sitting.py (the third walk-through's 81, named as over one sitting)
    cells = _cells()
    explore = next(i for i, c in enumerate(cells) if "".join(c["source"]).startswith("## Explore"))
    assert "What to take away" in "".join(cells[explore - 1]["source"])
    later = "".join("".join(c["source"]) for c in cells[explore:])
    assert "check_bf16_round" in later and "check_half_ulp" in later


# --- the draft's likely slips (besides the mutation suite's), on its own text from the notebook
# ---

def _exercise_text():
    import ast

    [cell] = [c for c in _cells() if "kernel-exercise" in c["metadata"].get("tags", [])]
    return ast.parse("".join(cell["source"])).body[0].value.value


MISTAKES = [  # (name, old, new, words of the message, caught without running)
    ("stores one by one", "            store128(dinp_row + c, d);\n",
     "            for (int k = 0; k < x128::size; k++) dinp_row[c + k] = d[k];\n",
     ("128-bit store",), True),
    ("= for +=", "d[k] = __float2bfloat16((float)d[k] + r * (dnorm",
     "d[k] = __float2bfloat16(r * (dnorm", ("dinp", "+="), False),
    ("no shared atomic", "atomicAdd(&dweight_shared[c + k], norm * (float)g[k]);",
     "dweight_shared[c + k] += norm * (float)g[k];", ("dweight_shared", "0 ATOMS"), True),
    ("the flush reads another slot", "atomicAdd(&dweight_accum[c], dweight_shared[c]);",
     "atomicAdd(&dweight_accum[c], dweight_shared[c / 8]);", ("dweight", "same slot"), False),
]


def _mistaken(old, new):
    text = _exercise_text()
    assert text.count(old) == 1, f"{old!r} is not in the solution once"
    return text.replace(old, new)


@pytest.mark.skipif(build.find_nvcc() is None, reason="nvcc not found")
@pytest.mark.parametrize("name, old, new, words", [m[:4] for m in MISTAKES if m[4]],
                         ids=[m[0] for m in MISTAKES if m[4]])
def test_a_slip_the_sass_shows_is_not_yet_without_a_gpu(name, old, new, words):
    verdict = lesson05.check_v4_draft(_mistaken(old, new))
    assert verdict.status == "NOT YET" and all(w in verdict.message for w in words), verdict


@pytest.mark.gpu
@pytest.mark.parametrize("name, old, new, words", [m[:4] for m in MISTAKES],
                         ids=[m[0] for m in MISTAKES])
def test_every_slip_is_not_yet_on_the_gpu(name, old, new, words):
    verdict = lesson05.check_v4_draft(_mistaken(old, new))
    assert verdict.status == "NOT YET" and all(w in verdict.message for w in words), verdict


# --- bf16's rounding and its error (the exercises and their figure) -------------------------------


def test_bf16_error_histogram():
    rng = np.random.default_rng(0)
    fig = lesson05.bf16_error_histogram({"a": rng.random(1000), "b": np.r_[0.0, rng.random(10)]},
                                     limit=0.5,
                                     xlabel="x", title="t")
    _small(fig)
    assert "1 exact" in " ".join(t.get_text() for t in fig.axes[0].get_legend().get_texts())
    _small(lesson05.bf16_error_histogram({"zeros only": np.zeros(5)}))


def _round_bits(x):
    u = x.view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def test_lesson05_bf16_round():
    assert lesson05.check_bf16_round(_round_bits).passed
    # a bf16 array is accepted too
    assert lesson05.check_bf16_round(lambda x: bf16.to_bf16(x)).passed
    cases = [(lambda x: (x.view(np.uint32) >> 16).astype(np.uint16), "truncates"),
             (lambda x: ((x.view(np.uint32) + 0x8000) >> 16).astype(np.uint16), "ties"),
             (lambda x: _round_bits(x)[:-1], "shape"),
             (lambda x: _round_bits(x).astype(np.float32), "uint16"),
             (lambda x: _round_bits(x) ^ 1, "differ"),
             (lambda x: None, "returns None"),
             (lambda x: x.nope, "AttributeError")]
    for fn, expect in cases:
        v = lesson05.check_bf16_round(fn)
        assert not v.passed and expect in v.message, v.message


def test_lesson05_half_ulp():
    assert lesson05.check_half_ulp(0.125).passed
    assert lesson05.check_half_ulp(2 ** -8, lo=1.0).passed
    assert lesson05.check_half_ulp(0.5, lo=128.0).passed
    # the notebook's question: between 1/16 and 1/8
    assert lesson05.check_half_ulp(2 ** -12, lo=1 / 16).passed
    v = lesson05.check_half_ulp(2 ** -11, lo=1 / 16)
    assert not v.passed and "spacing" in v.message, v.message
    for wrong, expect in [(0.25, "spacing"), (0.125 / 2 ** 16, "float32"), (0.1, "not 0.1"),
                          (None, "replace"),
                          ("x", "number")]:
        v = lesson05.check_half_ulp(wrong)
        assert not v.passed and expect in v.message, v.message


def test_half_ulp_is_what_ml_dtypes_does():
    x = np.linspace(32, 64, 100001, endpoint=False).astype(np.float32)
    err = np.abs(bf16.from_bf16(bf16.to_bf16(x)).astype(np.float64) - x)
    assert err.max() == lesson05.bf16._half_spacing(32.0)


# --- round 2 of issue 41: what the learner walk-through of 2026-12 found -----------------------

from _lesson_support import (  # noqa: E402
    core, opening_and_change_without_a_gpu, outputs, shown_above, tagged, tags, text)

from rmsnorm_lessons.course import investigate  # noqa: E402


@pytest.fixture
def no_gpu(monkeypatch):
    """Openings as a machine without a GPU shows them: the saved run's."""
    monkeypatch.setattr(investigate, "why_not_measured", lambda: "no GPU here")
    monkeypatch.setattr(lesson05, "_SEEN", {})


def test_the_opening_and_what_changed_run_without_a_gpu_and_show_the_saved_run():
    cells = opening_and_change_without_a_gpu("05_bf16")
    for tag in ("opening", "what-changed"):
        [at] = tagged(cells, tag)
        assert "nbval-ignore-output" in tags(cells[at]), tag
    [opening] = tagged(cells, "opening")
    shown = outputs(cells[opening])  # the saved run's here, labelled; a GPU run's once one ran
    assert ("saved on NVIDIA" in shown or "measured now on" in shown) and "DRAM throughput" in shown
    for i, cell in enumerate(cells):  # no later CPU cell takes a name from a GPU cell
        if "gpu" in tags(cell):
            bound = set(student.bound_names(text(cell).split("\n", 1)[1]))
            later = [c for c in cells[i + 1:] if "gpu" not in tags(c) and c["cell_type"] == "code"]
            assert not any(bound & student.free_names(text(c)) for c in later), text(cell)[:60]


def test_nothing_above_the_decision_states_the_row_rule():
    cells = _cells()
    [decision] = tagged(cells, "decision")
    above = shown_above(cells, decision)
    assert "multiple of 8" not in above and "C % 8" not in above


def test_the_reveal_shows_the_courses_draft_and_none_of_lesson_06s_lines():
    cells = _cells()
    [reveal] = tagged(cells, "reveal")
    assert '"v4_draft"' in text(cells[reveal])
    draft = build.kernel_source("v4_draft")
    for later in ("load128cs", "store128cg", "store128cs", "staged("):
        assert later not in draft, later
    ours = json.loads(registry.by_stem("06_vectorized").path.read_text())["cells"]
    [exercise] = tagged(ours, "kernel-exercise")
    # lesson 06 rewrites the learner's own draft: its new lines are the slot and the hints
    new = [ln.strip() for ln in student.solution_lines(text(ours[exercise]))
           if any(w in ln for w in ("staged", "128cs", "128cg"))]
    assert len(new) >= 4 and not any(line in draft for line in new), new


@pytest.mark.slow
@pytest.mark.skipif(build.find_nvcc() is None, reason="nvcc not found")
def test_the_courses_draft_passes_the_drafts_check():
    verdict = lesson05.check_v4_draft(build.kernel_source("v4_draft"))
    assert verdict.status in ("PASS", "NOT VERIFIED") and verdict.status != "NOT YET", verdict
    from rmsnorm_lessons import twin

    if twin.available() is None:
        assert verdict.passed, verdict


@pytest.mark.skipif(build.find_nvcc() is None, reason="nvcc not found")
def test_a_draft_that_never_loads_dinp_is_told_so_first():
    slipped = _mistaken("d = load128(dinp_row + c);", "d = x128::zeros();")
    verdict = lesson05.check_v4_draft(slipped)
    assert verdict.status == "NOT YET" and verdict.message.startswith("dinp is never read")


def test_the_bf16_demonstrations_and_the_questions_are_in_explore():
    """Round 3 (the second walk-through's 85 minutes): the sum kept in bf16 joins the range
    question in Explore; the core keeps the diagnosis, the decision, the draft and what changed."""
    cells = _cells()
    kept = "".join(text(c) for c in core(cells))
    assert "bf16_error_histogram" not in kept and "check_range" not in kept
    assert "check_sum_stalls" not in kept
    everything = "".join(text(c) for c in cells)
    assert "bf16_error_histogram" in everything and "check_sum_stalls" in everything
    for check in ("check_diagnosis", "check_v4_layout", "check_v4_draft", "what_changed"):
        assert check in kept, check


def test_a_wrong_bound_or_a_misread_figure_is_not_given_the_figure(no_gpu):
    figure = lesson05.measured().figure("dram_pct")
    wrong = lesson05.check_diagnosis("memory", "few_loads_in_flight", "dram_pct", figure)
    assert wrong.status == "NOT YET" and "row 'DRAM throughput'" in wrong.message
    assert f"{figure:g}" not in wrong.message and f"{figure:.0f}" not in wrong.message
    stall = lesson05.measured().figure("stall:long_scoreboard")
    misread = lesson05.check_diagnosis("latency", "few_loads_in_flight", "stall:long_scoreboard",
                                       stall / 2)
    assert misread.status == "NOT YET" and "read it again" in misread.message
    assert f"{stall:.0f}" not in misread.message


def test_a_figure_the_saved_run_lacks_is_not_verified_not_refused(no_gpu, monkeypatch):
    # the seed run (h100-2026-12-05, from its notebooks' text) has no DRAM bytes for v3
    from rmsnorm_lessons.course import saved

    current = saved.RUN
    monkeypatch.setattr(saved, "RUN", "h100-2026-12-05")
    verdict = lesson05.check_diagnosis("latency", "storage_width", "dram_bytes_per_element", 16)
    assert verdict.status == "NOT VERIFIED" and "DRAM bytes / element" in verdict.message
    assert lesson05.check_diagnosis("latency", "storage_width", "dram_pct", 48.7).status == \
        "NOT YET", "a figure that cannot show the cause is refused, saved run or not"
    # the current saved run measured them: the same reading is judged, not left unverified
    monkeypatch.setattr(saved, "RUN", current)
    monkeypatch.setattr(lesson05, "_SEEN", {})  # the seed's opening was kept: load the run's
    shown = lesson05.measured().figure("dram_bytes_per_element")
    assert shown is not None
    judged = lesson05.check_diagnosis("latency", "storage_width", "dram_bytes_per_element", shown)
    assert judged.verified and judged.status != "NOT VERIFIED", judged.message


def test_the_guess_is_set_beside_what_changed_and_the_timing_is_explored():
    cells = _cells()
    [changed], [guess] = tagged(cells, "what-changed"), tagged(cells, "prediction")
    assert guess < changed and "guess_beside(mine_v4, before, after" in text(cells[changed])
    kept = "".join(text(c) for c in core(cells))
    assert "rl.bench.table(" not in kept and "rl.bench.table(" in "".join(text(c) for c in cells)


# --- round 3 (the walk-through of 2026-12-06): messages that told a wrong reason ------------------

def _draft():
    import ast

    [cell] = [c for c in _cells() if "kernel-exercise" in c["metadata"].get("tags", [])]
    return ast.parse(text(cell)).body[0].value.value


@pytest.mark.skipif(build.find_nvcc() is None, reason="nvcc not found")
def test_a_plain_flush_blames_the_flush_alone_not_the_row_loads(monkeypatch):
    from rmsnorm_lessons.core import gpu

    monkeypatch.setattr(gpu, "why_unavailable", lambda: "hidden by the test")
    atomic = "atomicAdd(&dweight_accum[c], dweight_shared[c]);"
    source = _draft()
    assert source.count(atomic) == 1
    verdict = lesson05.check_v4_draft(
        source.replace(atomic, "dweight_accum[c] += dweight_shared[c];"), sanitize=False)
    assert verdict.status == "NOT YET", verdict
    assert "the flush is an atomicAdd on global memory" in verdict.message, verdict
    assert "is read or written narrower" not in verdict.message, verdict


@pytest.mark.skipif(build.find_nvcc() is None, reason="nvcc not found")
def test_a_column_loop_stepping_by_8_is_said_to_repeat_the_work(monkeypatch):
    from rmsnorm_lessons import twin
    from rmsnorm_lessons.core import gpu

    if twin.available() is not None:
        pytest.skip(twin.available())
    monkeypatch.setattr(gpu, "why_unavailable", lambda: "hidden by the test")
    step = "c += WARP_SIZE * x128::size"
    source = _draft()
    assert source.count(step) == 2
    verdict = lesson05.check_v4_draft(source.replace(step, "c += 8"), sanitize=False)
    assert verdict.status == "NOT YET", verdict
    assert "does not advance" not in verdict.message, verdict
    assert "Its loops do advance" in verdict.message and "more than one lane" in verdict.message
