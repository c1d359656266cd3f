"""Lesson 11 (v7 tuned: Little's law, the fixed cost, the search), on the CPU but for one GPU test:
its questions follow the plan (the tail rows, the final sum's rows), and its tuning exercise, a
search (rmsnorm_lessons/lessons/lesson11/tuning.py): refusals, the search space, the grading
against the default measured in the same run, a GPU's score."""
from __future__ import annotations

import pytest
from _lesson_support import fake_tuning_gpu as _fake_gpu
from _lesson_support import timing_row as _timing

from rmsnorm_lessons.core import gpu, ladder
from rmsnorm_lessons.core.ladder.v7_fast import Config
from rmsnorm_lessons.lessons import lesson11
from rmsnorm_lessons.lessons.lesson11 import tuning

# --- the questions --------------------------------------------------------------------------------


def test_choices_take_any_case_and_refuse_other_letters():
    assert lesson11.check_more_sms(" C ").passed
    v = lesson11.check_more_sms("d")
    assert not v.passed and 'give one of "a", "b", "c"' in v.message


def test_reduce_rows_follow_the_plan(monkeypatch):
    import dataclasses

    from rmsnorm_lessons.core import gpu

    # 132 partial rows on the H200's 132 SMs, 16 warps a block of the final sum: 9 for warp 0
    assert lesson11.reduce_rows(device=gpu.H200) == (9, 132, 16)
    small = dataclasses.replace(gpu.H200, multiprocessors=66)
    assert lesson11.reduce_rows(device=small) == (5, 66, 16)
    assert lesson11.check_reduce_rows(5, device=small).passed
    assert not lesson11.check_reduce_rows(9, device=small).passed


def test_tail_rows_follows_the_plan():
    # 264 row groups on the H200 at C = 4096 (accumulate: 2 groups a block, 132 blocks)
    assert lesson11.tail_rows(4096, 4096) == 4096 - 15 * 264
    assert lesson11.tail_rows(264 * 3, 4096) == 264


# --- the tuning exercise --------------------------------------------------------------------------


@pytest.mark.parametrize("config, says", [
    (None, "replace the placeholder"),
    ("fast", "give a Config"),
    ({"K": 7}, "Config.K"),
    ({"Q": 1}, "takes K, prefetch, per_sm and staged only"),
    ({"K": 1, "prefetch": True}, "prefetch needs K = 2"),
    (Config(staged=True), "lesson 12's path"),
    (Config(), "name at least one knob"),
])
def test_a_bad_config_is_refused_with_a_reason(config, says):
    v = tuning.check_tuning(config)
    assert v.status == "NOT YET" and says in v.message, v
    assert v.score is None


def test_a_config_that_cannot_run_is_refused_before_any_launch():
    v = tuning.check_tuning(Config(K=2, per_sm=2), 512)
    assert v.status == "NOT YET" and "one block an SM" in v.message, v
    v = tuning.check_tuning(Config(K=1), shape=(100, 16384))
    assert v.status == "NOT YET" and "cannot run (100, 16384)" in v.message, v


@pytest.mark.parametrize("kwargs, says", [
    ({"block": 384}, "block"), ({"block": True}, "block"), ({"repeats": 2}, "repeats"),
    ({"shape": (10, 100)}, "multiple of 8"), ({"shape": (0, 1024)}, "N >= 1"),
    ({"shape": (10.5, 1024)}, "whole numbers"), ({"shape": "16384x2048"}, "pair"),
    ({"shape": (16, 32768)}, "rows v7's register path holds"),
])
def test_bad_arguments_raise_naming_them(kwargs, says):
    with pytest.raises(ValueError, match=says):
        tuning.check_tuning(Config(K=2), **kwargs)


def test_the_space_is_the_knobs_taught_before_and_every_point_runs_the_shape():
    points = tuning.space()
    assert len(points) == len(set(points)) == 15
    N, C = tuning.SHAPE
    assert len({tuning.resolved(c, b, N, C, gpu.H200) for c, b in points}) == 15, "15 plans"
    assert {b for _, b in points} == set(tuning.BLOCKS)
    assert all(not c.staged and c.tunes_registers for c, _ in points)
    assert all(c.prefetch is False or c.K == 2 for c, _ in points)
    N, C = tuning.SHAPE
    for config, block in points:
        plan = ladder.plan(tuning._as_rung(block), N, C, gpu.H200, config=config)
        assert plan[0].kernel == "rmsnorm_backward_v7" and plan[0].block <= block
    # the default register plan is K = 2 with prefetch at this shape: in the space too
    r = ladder.v7_fast.resolve(N, C, gpu.H200, config=tuning.DEFAULT)
    assert (r.layout.K, r.layout.prefetch, r.per_sm) == (2, True, 1)
    assert (Config(K=2, prefetch=True), 512) in points
    assert tuning.describe(Config(K=2), 256, device=gpu.H200) == (
        "K=2, 2 blocks of 256 threads an SM")
    assert tuning.describe(Config(K=2, prefetch=True), 512, device=gpu.H200) == (
        "K=2, prefetch, 1 block of 512 threads an SM")


@pytest.mark.skipif(gpu.available(), reason="there is a GPU here: the check measures")
def test_without_a_gpu_a_valid_config_is_not_verified():
    v = tuning.check_tuning(Config(K=2, prefetch=False), 512)
    assert v.status == "NOT VERIFIED" and not v and v.score is None
    assert "GPU" in v.message and "can run 16384x2048" in v.message


def test_graded_against_the_default_measured_in_the_same_run(monkeypatch):
    timed = _fake_gpu(monkeypatch, yours_ms=0.0900, default_ms=0.1000)
    v = tuning.check_tuning(Config(K=2, prefetch=False), 512, repeats=7)
    assert v.passed and v.score == pytest.approx(100 * 0.08 / 0.09), v
    for words in ("yours (K=2, 1 block of 512 threads an SM) 88.9 %", "default register plan "
                  "80.0 %", "target 81.0 % (the default + 1.0 points", "best of the search space "
                  "here: 88.9 %", "16384x2048"):
        assert words in v.message, (words, v.message)
    (N, C, rows, modes, repeats), = timed
    assert (N, C, modes, repeats) == (16384, 2048, (False,), 7)
    names = [r[3] for r in rows]
    assert names[:2] == ["default", "yours"] and len(names) == 2 + 14  # yours left out of the space
    assert rows[0][:3] == ("v7_fast", False, tuning.DEFAULT)
    # below the target, reachable: NOT YET, with the knobs to think about, and the score
    _fake_gpu(monkeypatch, yours_ms=0.0995, default_ms=0.1000, space_ms=[0.09] * 14)
    v = tuning.check_tuning(Config(K=4), 512)
    assert v.status == "NOT YET" and "below the target" in v.message, v
    assert "Little's law" in v.message and v.score == pytest.approx(100 * 0.08 / 0.0995)
    assert "88.9 %" in v.message  # the best figure of the space, not its Config
    assert "K=2, 1 block" not in v.message


def test_the_margin_is_twice_the_spread_where_that_is_more():
    a, b = _timing("default", 0.1, spread=0.004), _timing("ceiling", 0.08, spread=0.01)
    assert tuning.margin(a, b) == pytest.approx(2.0)
    assert tuning.margin(_timing("d", 0.1, 0.001), _timing("c", 0.1, 0.002)) == tuning.MIN_MARGIN


def test_where_no_point_reaches_the_target_the_default_is_the_bar(monkeypatch):
    # every point of the space as slow as the default: the target is out of reach on this GPU
    _fake_gpu(monkeypatch, yours_ms=0.1003, default_ms=0.1000, space_ms=[0.1010] * 14)
    v = tuning.check_tuning(Config(K=2, prefetch=False), 512)
    assert v.passed and "the best this space offers" in v.message, v
    _fake_gpu(monkeypatch, yours_ms=0.1100, default_ms=0.1000, space_ms=[0.1010] * 14)
    v = tuning.check_tuning(Config(K=1), 512)
    assert v.status == "NOT YET" and "must come within" in v.message, v
    assert v.score == pytest.approx(100 * 0.08 / 0.11)


def test_grade_states_noise_and_never_passes_the_default():
    found = tuning.Search(yours=80.0, default=80.0, best=84.0, margin=1.0, noisy=True)
    v = tuning.grade(found, "K=2, prefetch, 1 block of 512 threads an SM", 16384, 2048)
    assert v.status == "NOT YET" and "noisy" in v.message and v.score == 80.0
    assert tuning.Search(90.0, 80.0, 79.0, 1.0, False).reachable


def test_a_wrong_result_is_not_timed(monkeypatch):
    timed = _fake_gpu(monkeypatch, yours_ms=0.1, default_ms=0.1, ok=False)
    v = tuning.check_tuning(Config(K=4))
    assert v.status == "NOT YET" and "wrong at (16384, 2048)" in v.message and v.score is None
    assert timed == []


def _lesson_cell() -> str:
    """Lesson 11's search: the one cell that calls the check."""
    import json

    from rmsnorm_lessons.course import registry

    nb = json.loads(registry.by_stem("11_v7_tuning").path.read_text())
    (cell,) = [c for c in nb["cells"] if "tuning.check_tuning(" in "".join(c["source"])]
    assert "exercise-check" in cell["metadata"].get("tags", [])
    return "".join(cell["source"])


def _choice_in(text: str):
    """The (Config, block) of the first ``yours_config, yours_block = ...`` line of ``text``."""
    import re

    line = re.search(r"^yours_config, yours_block = (Config\(.*?\)), (\d+)", text, re.M)
    return eval(line.group(1), {"Config": Config}), int(line.group(2))


def _choices(text: str) -> tuple:
    """The choice the cell starts from (its skeleton) and the solution's."""
    from rmsnorm_lessons.course import student

    return (_choice_in(student.strip_solutions(text)),
            _choice_in(text.split("### BEGIN SOLUTION")[1]))


def test_the_lesson_starts_from_the_poor_choice_and_its_solution_is_in_the_space():
    text = _lesson_cell()
    assert "tuning.check_tuning(yours_config, yours_block)" in text
    poor, good = _choices(text)
    assert poor == (tuning.POOR, 512) and good != poor
    assert good in tuning.space() and good[0] != tuning.DEFAULT


@pytest.mark.gpu
def test_the_search_on_the_gpu_parts_the_poor_start_from_the_solution():
    poor, good = _choices(_lesson_cell())
    start = tuning.check_tuning(*poor)
    assert start.status == "NOT YET" and start.score is not None, start
    solved = tuning.check_tuning(*good)
    assert solved.passed, solved
    assert 30 < solved.score < 130 and solved.score > start.score, (solved, start)
    assert "% of the same-bytes ceiling at 16384x2048" in solved.message
