"""Lesson 08 (v6, the seed's kernel10), on the CPU: the fence decision passes its answer and says
what each missing fence allows; the fence count follows this GPU's plan; the kernel check catches
the seed's atomicInc limit from the text and lets ptxas spill a few bytes at v6's register bound,
not more; the opening profiles v5's second kernel; no exercise line (the limit, the fences' place)
is spelled out above the exercise; atomicInc's wrap and the seed's tickets (the exercises), the
second-wave question's options."""
from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import numpy as np
import pytest

from rmsnorm_lessons.core import gpu
from rmsnorm_lessons.course import registry, student
from rmsnorm_lessons.lessons import lesson08

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "08_last_block.ipynb"


def test_the_fences(capsys):
    lesson08.outline()
    shown = capsys.readouterr().out
    assert all(f"{i}  (empty)" in shown for i in (2, 5, 9)) and "atomicInc" in shown
    verdict = lesson08.check_fences({2, 5})
    assert verdict.passed and "release" in verdict.message and "acquire" in verdict.message
    for wrong, says in [({5}, "barrier at 3 orders the block's threads"), ({2}, "__ldcg orders "
                        "nothing"), (set(), "without a fence at 2"), ({2, 5, 9}, "buys nothing"),
                        ({3}, "hold a step already"), (None, "replace the ..."), (2, "a set")]:
        verdict = lesson08.check_fences(wrong)
        assert verdict.status == "NOT YET" and says in verdict.message, (wrong, verdict.message)


def test_the_fence_count_follows_this_gpus_plan(monkeypatch):
    assert lesson08.check_membar_count(2 * 132 * 16 + 1).passed  # the saved card: 132 SMs
    device = dataclasses.replace(gpu.H200, multiprocessors=108)
    monkeypatch.setattr(gpu, "facts_or_fallback", lambda: (device, "a test GPU"))
    assert lesson08.check_membar_count(216 * 16 + 1).passed
    for wrong, says in [(2, "that is the program"), (216 * 512 + 1, "counts threads"),
                        (216 * 16, "the last block's acquire"), (432, "not one per block"),
                        (5, "216 blocks of 16 warps"), (None, "replace None")]:
        verdict = lesson08.check_membar_count(wrong)
        assert verdict.status == "NOT YET" and says in verdict.message, (wrong, verdict.message)


def test_the_seeds_limit_is_caught_in_the_text_with_its_trace():
    rx = re.compile(lesson08.SEED_LIMIT)
    for seed in ("ticket = atomicInc(ticket_counter, gridDim.x);",
                 "t = atomicInc(counter,gridDim.x )"):
        assert rx.search(seed), seed
    for v6 in ("ticket = atomicInc(ticket_counter, gridDim.x - 1);", "atomicAdd(p, gridDim.x)"):
        assert not rx.search(v6), v6
    trace = lesson08.seed_limit_trace()
    assert "[4, 0, 1, 2]" in trace and "[3, 4, 0, 1]" in trace and "nobody sums" in trace


def test_a_few_bytes_of_spill_pass_and_more_do_not():
    from rmsnorm_lessons.core.ptxas import Resources

    check = lesson08.little_local_memory("k")

    class Compiled:
        def __init__(self, **kw):
            fields = dict(kernel="k", arch="sm_90", registers=64, shared_bytes=16, stack_bytes=0,
                          spill_stores=0, spill_loads=0, barriers=1, constant_bytes=0)
            self.resources = {"k": Resources(**{**fields, **kw})}

    class Context:
        def __init__(self, **kw):
            self.compiled = Compiled(**kw)

    assert check.test(Context()) is None
    assert check.test(Context(stack_bytes=4, spill_stores=4, spill_loads=4)) is None
    said = check.test(Context(stack_bytes=16, spill_stores=0))
    assert said and "local array" in said
    assert "64 registers" in check.test(Context(stack_bytes=32, spill_stores=32, spill_loads=32))


def test_the_opening_profiles_v5s_second_kernel(monkeypatch):
    from rmsnorm_lessons.course import investigate

    seen = []
    monkeypatch.setattr(lesson08, "_SEEN", {})  # what these fakes return stays in this test
    monkeypatch.setattr(investigate, "opening",
                        lambda version, N, C, **kw: seen.append((version, N, C, kw)) or version)
    lesson08.opening()
    lesson08.opening(after=True)
    assert seen == [("v5_two_pass", 16384, 2048, {"kernels": ("reduce_dweight_v5",)}),
                    ("v6_last_block", 16384, 2048, {})]


def _cells():
    return json.loads(NOTEBOOK.read_text())["cells"]


def _index(cells, tag):
    return [i for i, c in enumerate(cells) if tag in c.get("metadata", {}).get("tags", [])]


def _shown(cell):
    outs = "".join("".join(o.get("text") or o.get("data", {}).get("text/plain") or "")
                   for o in cell.get("outputs", []))
    return "".join(cell["source"]) + outs


def test_no_exercise_line_is_spelled_out_above_the_exercise():
    cells = _cells()
    [decision], [exercise] = _index(cells, "decision"), _index(cells, "kernel-exercise")
    above = "".join(_shown(c) for c in cells[:exercise])
    assert "gridDim.x - 1" not in above and "atomicInc(counter, gridDim.x" not in above
    assert "__threadfence" not in "".join(_shown(c) for c in cells[:decision] if
                                          c["cell_type"] == "code")
    text = "".join(cells[exercise]["source"])
    counted = [ln for ln in student.solution_lines(text)
               if ln.strip() and not ln.strip().startswith("//")]
    assert len(counted) >= 20, "the last block's end: 20 lines or more, from the comment"
    skeleton = student.strip_solutions(text)
    assert "__threadfence" not in skeleton and "atomicInc(" not in skeleton


def test_the_lesson_measures_diagnoses_decides_writes_and_measures_again():
    cells = _cells()
    [opening], [diagnosis], [decision], [exercise], [changed] = (
        _index(cells, t) for t in ("opening", "diagnosis", "decision", "kernel-exercise",
                                   "what-changed"))
    assert opening < diagnosis < _index(cells, "explanation")[0] < decision < exercise < changed
    text = "".join("".join(c["source"]) for c in cells)
    for moved in ("64-bit", "opt in", "Q4", "check_wrap_row", "memcpy_convert"):
        assert moved not in text, f"{moved}: lesson 13's now"


def test_the_registry_row_follows_the_notebook():
    lesson = registry.by_stem("08_last_block")
    assert lesson.exercises[:3] == ("lesson08.check_diagnosis", "lesson08.check_fences",
                                    "lesson08.check_v6_kernel")
    assert lesson.minutes <= 75


@pytest.mark.gpu
def test_every_block_summing_is_not_yet_on_the_gpu():
    import ast

    [exercise] = _index(_cells(), "kernel-exercise")
    text = ast.parse("".join(_cells()[exercise]["source"])).body[0].value.value
    old = "    if (ticket != gridDim.x - 1) return;\n"
    assert text.count(old) == 1
    verdict = lesson08.check_v6_kernel(text.replace(old, ""))
    assert verdict.status == "NOT YET" and "dweight" in verdict.message, verdict


# --- the second-wave question's options -----------------------------------------------------------


def test_a_choice_question_lists_its_options_in_its_docstring():
    for check in (lesson08.check_second_wave,):
        assert all(f"\n    {o})" in check.__doc__ for o in "abc"), check.__name__
        assert check("d").status == "NOT YET"


# --- atomicInc and the seed's tickets (the exercises) ---------------------------------------------


def test_lesson07_atomic_inc():
    assert lesson08.check_atomic_inc(lambda old, limit: 0 if old >= limit else old + 1).passed
    cases = [(lambda old, limit: 0 if old > limit else old + 1, "wraps when old >= limit"),
             (lambda old, limit: 0 if old >= limit - 1 else old + 1, "still becomes limit"),
             (lambda old, limit: old + 1, "atomicInc stores"),
             (lambda old, limit: None, "returns None"),
             (lambda old, limit: {}[old], "KeyError")]
    for fn, expect in cases:
        v = lesson08.check_atomic_inc(fn)
        assert not v.passed and expect in v.message, v.message


def test_seed_tickets_and_v6_tickets():
    assert lesson08.seed_tickets(4, 3) == [[0, 1, 2, 3], [4, 0, 1, 2], [3, 4, 0, 1]]
    # v6's limit gridDim.x - 1: every launch draws 0..G-1 and the counter comes back to 0
    for G in (1, 2, 5, 264):
        assert lesson08.seed_tickets(G, 4, limit=G - 1) == [list(range(G))] * 4


def test_lesson07_seed_tickets_check():
    assert lesson08.check_seed_tickets([4, 0, 1, 2], [3, 4, 0, 1]).passed
    assert lesson08.check_seed_tickets((4, 0, 1, 2), np.array([3, 4, 0, 1])).passed
    for l2, l3, expect in [([0, 1, 2, 3], [0, 1, 2, 3], "not 0"),
                           ([4, 0, 1, 2], [0, 1, 2, 3], "launch 3"),
                           ([1, 2, 3, 4], [3, 4, 0, 1], "launch 2 is not"),
                           (None, None, "replace None"),
                           (["a"], [1], "whole numbers")]:
        v = lesson08.check_seed_tickets(l2, l3)
        assert not v.passed and expect in v.message, v.message
