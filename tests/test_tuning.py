"""The tuning exercise's check (rmsnorm_lessons/lessons/lesson11/tuning.py): refusals, a GPU's
score."""
from __future__ import annotations

import pytest

from rmsnorm_lessons.core import gpu, ladder
from rmsnorm_lessons.core.ladder.v7_fast import Config
from rmsnorm_lessons.lessons.lesson11 import tuning


@pytest.mark.parametrize("config, says", [
    (None, "replace the placeholder"),
    ("fast", "give a Config"),
    ({"K": 7}, "Config.K"),
    ({"Q": 1}, "takes K, prefetch, per_sm and staged only"),
    ({"K": 1, "prefetch": True}, "prefetch needs K = 2"),
])
def test_a_bad_config_is_refused_with_a_reason(config, says):
    v = tuning.check_tuning(config)
    assert v.status == "NOT YET" and says in v.message, v
    assert v.score is None


def test_a_config_that_cannot_run_a_shape_is_refused():
    v = tuning.check_tuning(Config(K=1), shapes=[(100, 16384)])
    assert v.status == "NOT YET" and "cannot run (100, 16384)" in v.message
    assert "block_size" in v.message


@pytest.mark.parametrize("kwargs, says", [
    ({"target": 0}, "target"), ({"target": "90"}, "target"), ({"target": 250}, "target"),
    ({"shapes": []}, "at least one"), ({"shapes": [(10, 100)]}, "multiple of 8"),
    ({"shapes": [(0, 1024)]}, "N >= 1"), ({"shapes": [(10.5, 1024)]}, "whole numbers"),
    ({"shapes": "16384x4096"}, "pairs"), ({"repeats": 2}, "repeats"),
])
def test_bad_arguments_raise_naming_them(kwargs, says):
    with pytest.raises(ValueError, match=says):
        tuning.check_tuning(Config(), **kwargs)


@pytest.mark.skipif(gpu.available(), reason="there is a GPU here: the check measures")
def test_without_a_gpu_a_valid_config_is_not_verified():
    v = tuning.check_tuning(Config(K=2, prefetch=True))
    assert v.status == "NOT VERIFIED" and not v and v.score is None
    assert "GPU" in v.message


@pytest.mark.gpu
def test_the_score_is_the_ceilings_time_over_v7s_measured_now():
    plan_default = tuning.check_tuning(Config(), target=1, repeats=10)
    assert plan_default.passed and plan_default.score is not None, plan_default
    assert 30 < plan_default.score < 130, plan_default  # a time ratio against the same bytes
    assert "% of the same-bytes ceiling" in plan_default.message
    assert "16384x4096" in plan_default.message and "measured in this run" in plan_default.message
    # the register path with the plan's other choices: graded the same way, below an unreachable
    # target
    register = tuning.check_tuning(Config(staged=False), target=199, repeats=10)
    assert register.status == "NOT YET", register
    assert "below the target of 199 %" in register.message, register
    assert 30 < register.score < 130, register


def _fake_gpu(monkeypatch, yours_ms, ceiling_ms, ok=True):
    """The GPU's side replaced: a check report that is ``ok`` and the timings given, per shape."""
    from types import SimpleNamespace

    from rmsnorm_lessons.core import compare
    from rmsnorm_lessons.speed import bench

    timed = []
    monkeypatch.setattr(gpu, "why_unavailable", lambda: None)
    monkeypatch.setattr(compare, "check_version", lambda *a, **k: SimpleNamespace(ok=ok))

    def time_shape(N, C, rows, ceiling_modes=(), copy_gbps=float("nan"), repeats=50):
        (spec, overwrite, config, label), = rows
        timed.append((N, C, spec.name, overwrite, config, label, ceiling_modes, repeats))
        k = len(timed) - 1
        suffix = bench.OVERWRITE_SUFFIX if overwrite else ""
        row = lambda name, ms: SimpleNamespace(name=name, ms=ms, noisy=False)  # noqa: E731
        return [row(label + suffix, yours_ms[k]), row(bench.STREAM_NAME + suffix, ceiling_ms[k])]

    monkeypatch.setattr(bench, "time_shape", time_shape)
    return timed


def test_graded_on_the_ratio_of_times_measured_together(monkeypatch):
    timed = _fake_gpu(monkeypatch, yours_ms=[0.125], ceiling_ms=[0.100])
    v = tuning.check_tuning(Config(K=2, prefetch=True), target=80, repeats=7)
    assert v.passed and v.score == pytest.approx(80.0), v
    assert "125.0 us against the ceiling's 100.0 us (80.0 %)" in v.message
    config = Config(K=2, prefetch=True)
    assert timed == [(16384, 4096, "v7_fast", False, config, "yours", (False,), 7)]
    _fake_gpu(monkeypatch, yours_ms=[0.125], ceiling_ms=[0.100])
    v = tuning.check_tuning(Config(K=2, prefetch=True), target=80.5)
    assert v.status == "NOT YET" and v.score == pytest.approx(80.0), v
    assert "below the target" in v.message


def test_several_shapes_take_the_geometric_mean(monkeypatch):
    timed = _fake_gpu(monkeypatch, yours_ms=[0.2, 0.1], ceiling_ms=[0.1, 0.1])
    v = tuning.check_tuning(Config(), shapes=[(8192, 1024), (4096, 2048)], overwrite=True,
                            target=50)
    assert v.score == pytest.approx(100 * (0.5 * 1.0) ** 0.5), v
    assert v.passed and "(dinp=)" not in v.message
    assert [(t[0], t[1], t[3], t[6]) for t in timed] == [(8192, 1024, True, (True,)),
                                                         (4096, 2048, True, (True,))]


def test_a_wrong_result_is_not_timed(monkeypatch):
    timed = _fake_gpu(monkeypatch, yours_ms=[0.1], ceiling_ms=[0.1], ok=False)
    v = tuning.check_tuning(Config(K=4))
    assert v.status == "NOT YET" and "wrong at (16384, 4096)" in v.message and v.score is None
    assert timed == []


def _lesson_cell() -> str:
    """Lesson 11's tuning exercise: the one cell that calls the check."""
    import json

    from rmsnorm_lessons.course import registry

    nb = json.loads(registry.by_stem("11_v7_tuning").path.read_text())
    (cell,) = [c for c in nb["cells"] if "tuning.check_tuning(" in "".join(c["source"])]
    assert "exercise-check" in cell["metadata"].get("tags", [])
    return "".join(cell["source"])


def _config_in(text: str) -> Config:
    """The Config of the first ``yours_config = Config(...)`` line of ``text``."""
    import re

    return eval(re.search(r"^yours_config = (Config\(.*?\))", text, re.M).group(1),
                {"Config": Config})


def _configs(text: str) -> tuple:
    """The Config the cell starts from (its skeleton) and the solution's."""
    from rmsnorm_lessons.course import student

    return (_config_in(student.strip_solutions(text)),
            _config_in(text.split("### BEGIN SOLUTION")[1]))


def test_the_lesson_states_the_target_and_starts_from_the_poor_config():
    text = _lesson_cell()
    assert f"target={tuning.TARGET:g})" in text
    poor, good = _configs(text)
    assert poor == tuning.POOR and good != poor
    # both run the default shape on the H200's facts (the CPU check says NOT VERIFIED for either)
    for config in (poor, good):
        for N, C in tuning.SHAPES:
            ladder.plan("v7_fast", N, C, gpu.H200, config=config)


@pytest.mark.gpu
def test_the_lessons_target_parts_the_poor_start_from_the_solution():
    poor, good = _configs(_lesson_cell())
    start = tuning.check_tuning(poor, target=tuning.TARGET)
    assert start.status == "NOT YET" and "below the target" in start.message, start
    solved = tuning.check_tuning(good, target=tuning.TARGET)
    assert solved.passed, solved
    assert solved.score > start.score, (solved, start)
