"""Lesson 07 (v5, the same bits on every run), on the CPU: the three decisions (scratch bytes from
this GPU's plan, the staging step's barriers, shared memory and blocks per SM) pass their answers
and say what is wrong with the likely slips; the opening asks for the twenty calls' figure on a
GPU only; the kernel exercise starts from its signatures; the notebook's order. On a GPU: the
twenty calls of v4 differ and v5's do not."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from rmsnorm_lessons.core import gpu, ladder
from rmsnorm_lessons.course import registry, student
from rmsnorm_lessons.lessons import lesson07

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "07_two_pass.ipynb"


@pytest.fixture
def a100(monkeypatch):
    """A GPU of 108 SMs (sm_80): the decisions follow this GPU's plan, not a constant."""
    device = dataclasses.replace(gpu.H200, multiprocessors=108, compute_capability=(8, 0))
    monkeypatch.setattr(lesson07, "this_gpu", lambda: (device, "a test GPU"))
    return device


def test_scratch_bytes_follow_this_gpus_plan(a100):
    want = 2 * 108 * 2048 * 4
    verdict = lesson07.check_scratch_bytes(want)
    assert verdict.passed and "216 blocks" in verdict.message and "a test GPU" in verdict.message
    for wrong, says in [(2 * 132 * 2048 * 4, "2 blocks on each of this GPU's SMs"),
                        (want // 2, "fp32 sums"), (want // 4, "floats, not bytes"),
                        (16384 * 2048 * 4, "per block, not per row"), (None, "replace None"),
                        ("x", "whole number")]:
        verdict = lesson07.check_scratch_bytes(wrong)
        assert verdict.status == "NOT YET" and says in verdict.message, (wrong, verdict.message)
    # few rows: fewer blocks than the SMs hold
    assert lesson07.check_scratch_bytes(ladder.plan("v5_two_pass", 64, 768, a100)[0].grid * 768 * 4,
                                        N=64, C=768).passed


def test_the_staging_barriers(capsys):
    lesson07.outline()
    shown = capsys.readouterr().out
    assert "2  (empty)" in shown and "4  (empty)" in shown and "__syncthreads()" in shown
    assert lesson07.check_staging_barriers({2, 4}).passed
    assert lesson07.check_staging_barriers([4, 2.0]).passed
    for wrong, says in [({4}, "racecheck"), ({2}, "still reading"), (set(), "without a barrier"),
                        ({1, 2, 4}, "hold a step already"), (..., "replace the ..."),
                        (7, "a set of slot numbers"), ({"two"}, "a set of slot numbers")]:
        verdict = lesson07.check_staging_barriers(wrong)
        assert verdict.status == "NOT YET" and says in verdict.message, (wrong, verdict.message)


def test_shared_memory_and_blocks_per_sm(a100):
    rung = ladder.get("v5_two_pass")
    smem = rung.shared_memory(2048, rung.block_size)
    assert smem == (2048 + 15 * 32 * 4) * 4
    verdict = lesson07.check_v5_occupancy(smem, 2)
    assert verdict.passed and "sm_80" in verdict.message and "registers" in verdict.message
    for args, says in [((smem + 1024, 2), "the driver keeps"), ((2048 * 4, 2), "dweight alone"),
                       ((1000, 2), "staging area"), ((smem, 4), "registers decide"),
                       ((smem, 1), "take the smallest"), ((None, 2), "replace None of smem_bytes"),
                       ((smem, 2.5), "whole number")]:
        verdict = lesson07.check_v5_occupancy(*args)
        assert verdict.status == "NOT YET" and says in verdict.message, (args, verdict.message)


def test_the_opening_measures_the_twenty_calls_on_a_gpu_only(monkeypatch):
    from rmsnorm_lessons.course import investigate

    seen = []
    monkeypatch.setattr(lesson07, "_SEEN", {})  # what these fakes return stays in this test
    monkeypatch.setattr(investigate, "opening",
                        lambda version, N, C, **kw: seen.append((version, N, C, kw)) or version)
    monkeypatch.setattr(lesson07, "differing_channels", lambda version: f"ran {version}")
    assert lesson07.opening() == "v4_vec_bf16" and lesson07.measured() == "v4_vec_bf16"
    assert lesson07.opening(after=True) == "v5_two_pass"
    (version, N, C, kw), _ = seen
    assert (version, N, C) == ("v4_vec_bf16", 16384, 2048)
    measure = kw["figures"]["differing_channels"]
    assert callable(measure) and measure() == "ran v4_vec_bf16"  # called by the opening, on a GPU
    assert seen[1][3]["figures"]["differing_channels"]() == "ran v5_two_pass"


def _cells():
    return json.loads(NOTEBOOK.read_text())["cells"]


def _index(cells, tag):
    return [i for i, c in enumerate(cells) if tag in c.get("metadata", {}).get("tags", [])]


def test_the_kernel_exercise_starts_from_its_signatures():
    cells = _cells()
    [exercise] = _index(cells, "kernel-exercise")
    text = "".join(cells[exercise]["source"])
    skeleton = student.strip_solutions(text)
    head = skeleton.index('extern "C" __global__ void reduce_dweight_v5(')
    body = skeleton[skeleton.index("{", head) + 1:skeleton.rindex("}")]
    lines = [line.strip() for line in body.splitlines() if line.strip()]
    assert lines and all(line.startswith("// TODO") for line in lines), lines
    assert skeleton[:head].rstrip().splitlines()[-1].startswith("//"), "a comment says what"
    assert "partials + (size_t)blockIdx.x * C" not in skeleton
    above = "".join("".join(c["source"]) for c in cells[:exercise])
    assert "one thread per channel" not in above.lower(), "the second kernel's recipe"
    assert "block_dweight_rows" in text and "store_block_partials" not in text


def test_the_lesson_measures_diagnoses_decides_writes_and_measures_again():
    cells = _cells()
    [opening], [diagnosis], [exercise], [changed] = (
        _index(cells, t) for t in ("opening", "diagnosis", "kernel-exercise", "what-changed"))
    decisions = _index(cells, "decision")
    assert len(decisions) == 3
    assert opening < diagnosis < _index(cells, "explanation")[0] < decisions[0]
    assert decisions[-1] < exercise < changed
    above = " ".join("".join(c["source"]) for c in cells[:diagnosis]
                     if c["cell_type"] == "markdown")
    assert "atomic" not in above.lower().split("what you will be able to do")[1]


def test_the_registry_row_follows_the_notebook():
    lesson = registry.by_stem("07_two_pass")
    assert lesson.exercises[:5] == ("lesson07.check_diagnosis", "lesson07.check_scratch_bytes",
                                    "lesson07.check_staging_barriers",
                                    "lesson07.check_v5_occupancy", "lesson07.check_v5_kernel")
    assert lesson.minutes <= 75


@pytest.mark.gpu
def test_twenty_calls_of_v4_differ_and_of_v5_do_not():
    assert lesson07.differing_channels("v4_vec_bf16", 4096, 1024, runs=5) > 0
    assert lesson07.differing_channels("v5_two_pass", 4096, 1024, runs=5) == 0


# --- round 2 of issue 41: what the learner walk-through of 2026-12 found -----------------------

from _lesson_support import (  # noqa: E402
    core, kernel_solution, opening_and_change_without_a_gpu, tagged, text)

from rmsnorm_lessons import twin  # noqa: E402
from rmsnorm_lessons.core import build  # noqa: E402

needs_twin = pytest.mark.skipif(build.find_nvcc() is None or twin.available() is not None,
                                reason="nvcc or the CPU twin (g++ on Linux) not here")


def _solution():
    return kernel_solution("07_two_pass")


def test_the_opening_and_what_changed_run_without_a_gpu():
    opening_and_change_without_a_gpu("07_two_pass")


def test_no_demonstration_under_the_diagnosis_shows_the_cause():
    cells = _cells()
    [diagnosis], first = tagged(cells, "diagnosis"), tagged(cells, "decision")[0]
    between = [c for c in cells[diagnosis + 1:first] if c["cell_type"] == "code"]
    assert all("partials_reduction" in text(c) for c in between), [text(c)[:50] for c in between]
    assert "np.cumsum" not in "".join(text(c) for c in core(cells))


def test_the_occupancy_decision_prints_the_registers_it_needs():
    cells = _cells()
    [cell] = [c for c in cells if "check_v5_occupancy" in text(c)]
    before_solution = text(cell).split("### BEGIN SOLUTION")[0]
    assert "rl.build.resources(\"v5_two_pass\"" in before_solution and "print(" in before_solution
    assert "64 at most" in "".join(text(c) for c in cells if "launch_bounds__(512, 2)" in text(c)
                                   and c["cell_type"] == "markdown")


@needs_twin
@pytest.mark.parametrize("old, new, says", [
    ("for (int b = 0; b < blocks; b++)", "for (int b = blocks - 1; b >= 0; b--)",
     "does not add the partials in block order"),
    ("float sum = 0.0f;", "double sum = 0.0;", "adds in double"),
])
def test_a_reduce_out_of_block_order_is_not_yet(old, new, says):
    text_ = _solution()
    assert text_.count(old) == 1
    verdict = lesson07.check_v5_kernel(text_.replace(old, new))
    assert verdict.status == "NOT YET" and says in verdict.message, verdict


@pytest.mark.skipif(build.find_nvcc() is None, reason="nvcc not found")
def test_partials_stored_a_float_at_a_time_are_not_yet():
    old = ("for (int c = threadIdx.x * f128::size; c < C; c += blockDim.x * f128::size) {\n"
           "        store128(my_partials + c, load128(dweight_shared + c));")
    text_ = _solution()
    assert text_.count(old) == 1
    verdict = lesson07.check_v5_kernel(text_.replace(
        old, "for (int c = threadIdx.x; c < C; c += blockDim.x) {\n"
             "        my_partials[c] = dweight_shared[c];"))
    assert verdict.status == "NOT YET" and "16 bytes a store" in verdict.message, verdict


def test_the_order_probe_sums_in_float32_block_order():
    from rmsnorm_lessons.lessons import probe

    terms = np.array([[1e8], [1.0], [-1e8], [1.0], [1.0]], np.float32)
    assert probe.float32_in_order(terms)[0] == 2.0
    assert probe.float32_in_order(terms[::-1])[0] == 0.0


def test_the_questions_close_the_lesson_and_the_register_question_is_explored():
    cells = _cells()
    kept = core(cells)
    heads = [text(c).splitlines()[0] for c in kept if c["cell_type"] == "markdown"
             and text(c).startswith("## ")]
    assert heads[-2:] == ["## Questions", "## What to take away"], heads
    start = max(i for i, c in enumerate(kept) if text(c).startswith("## Questions"))
    asked = [c for c in kept[start:] if c["cell_type"] == "code"]
    # round 3 (the second walk-through's 84 minutes): the second-wave question, 10 of them, joins
    # the register question in Explore, with sm_89's limits it needs
    assert [text(c).splitlines()[-1].split("(")[0] for c in asked] == ["lesson07.check_same_bits"]
    assert all(c["metadata"]["rmsnorm_lessons"]["answers"] for c in asked)
    explore = "".join(text(c) for c in cells[len(kept):])
    for words in ("check_second_wave", "check_launch_bound_registers", "np.cumsum",
                  "sm_89's limits"):
        assert words in explore, words


def test_the_guess_is_set_beside_what_changed_and_the_timing_is_explored():
    cells = _cells()
    [changed] = tagged(cells, "what-changed")
    assert "guess_beside(mine_v5, before, after" in text(cells[changed])
    assert "rl.bench.table(" not in "".join(text(c) for c in core(cells))
