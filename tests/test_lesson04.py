"""Lesson 04 (CPU): v2 diagnosed from its profile and three ablations, where a block sums dweight
and where it waits decided with the consequence shown, v3 written whole, the occupancy cap
(issue 41). The opening's GPU path runs here on fakes, so the GPU run goes right the first time."""
import ast

import pytest
from _lesson_notebooks import cells, investigation_order, shown_above, tagged, text

from rmsnorm_lessons.core import build, gpu, ladder
from rmsnorm_lessons.course import investigate, student
from rmsnorm_lessons.lessons import lesson04
from rmsnorm_lessons.speed import bench
from rmsnorm_lessons.speed.timing import Timing

STEM = "04_shared_memory"


@pytest.fixture
def saved(monkeypatch):
    monkeypatch.setattr(gpu, "why_unavailable", lambda: "hidden by the test: saved run")
    monkeypatch.setattr(lesson04, "_OPENINGS", {})
    return lesson04.opening()


# --- the opening and the diagnosis ---------------------------------------------------------------

def test_each_ablation_removes_one_statement_of_v2():
    text_of_v2 = build.kernel_text(ladder.get("v2_warp"))[1]
    for line in lesson04.ABLATIONS.values():
        assert text_of_v2.count(line) == 1, line


def test_the_opening_measures_v2_and_its_three_ablations_on_a_gpu(monkeypatch):
    """The GPU path with the GPU, ncu and the timings faked: the figures come out named as the
    diagnosis reads them."""
    base = investigate.opening("v2_warp", 8192, 1024)  # the saved one here: its profile is real
    times = {"v2_warp": 0.27}
    times.update({f"v2_warp without {line.strip()}": ms for line, ms in
                  zip(lesson04.ABLATIONS.values(), (0.08, 0.2, 0.25))})

    def fake_time(version, N, C, copy, repeats=20, name=None, **_):
        label = name or (version if isinstance(version, str) else version.name)
        return Timing(label, N, C, times[label], 0.01, 1, 1.0, copy)

    monkeypatch.setattr(investigate, "why_not_measured", lambda: None)
    monkeypatch.setattr(investigate.nsight, "profile", lambda *a, **k: base.profile)
    monkeypatch.setattr(bench, "bench_version", fake_time)
    monkeypatch.setattr(gpu, "copy_bandwidth", lambda: 3000.0)
    monkeypatch.setattr(gpu, "facts", lambda: gpu.H200)
    monkeypatch.setattr(investigate, "_COPY", {})
    monkeypatch.setattr(lesson04, "_OPENINGS", {})
    opened = lesson04.opening()
    assert opened.measured_now
    assert opened.figures == pytest.approx({"ablation:atomicAdd": 100 * (1 - 0.08 / 0.27),
                                            "ablation:dinp": 100 * (1 - 0.2 / 0.27),
                                            "ablation:partial": 100 * (1 - 0.25 / 0.27)})
    assert "without atomicAdd" in str(opened) and "-bound" not in str(opened)
    verdict = lesson04.check_diagnosis("latency", "global_atomics", "ablation:atomicAdd",
                                       opened.figure("ablation:atomicAdd"))
    assert verdict.passed and "measured now" in verdict.message, verdict


def test_the_intended_diagnosis_passes_on_the_saved_opening(saved):
    assert (saved.version, saved.shape) == ("v2_warp", (8192, 1024))
    value = saved.figure("ablation:atomicAdd")
    assert value is not None, "the saved run has v2's atomicAdd ablation"
    verdict = lesson04.check_diagnosis("latency", "global_atomics", "ablation:atomicAdd", value)
    assert verdict.passed and "goes after it" in verdict.message, verdict


@pytest.mark.parametrize("answer,why", [
    (("latency", "few_threads", "occupancy_pct", "occupancy_pct"), "warp slots are filled"),
    (("latency", "dram_bandwidth", "dram_pct", "dram_pct"), "under the 60 % line"),
    (("memory", "global_atomics", "ablation:atomicAdd", "ablation:atomicAdd"),
     "memory-bound means"),
    (("latency", "global_atomics", "stall:long_scoreboard", "stall:long_scoreboard"),
     "fire-and-forget"),
    (("latency", "global_atomics", "ablation:atomicAdd", 20.0), "you read ablation:atomicAdd"),
])
def test_each_likely_wrong_diagnosis_says_why(saved, answer, why):
    bound, cause, metric, value = answer
    value = saved.figure(value) if isinstance(value, str) else value
    verdict = lesson04.check_diagnosis(bound, cause, metric, value)
    assert verdict.status == "NOT YET" and why in verdict.message, verdict


def test_a_supported_cause_v3_keeps_is_not_yet_and_says_so(saved):
    verdict = lesson04.check_diagnosis("latency", "few_loads_in_flight", "stall:long_scoreboard",
                                       saved.figure("stall:long_scoreboard"))
    assert verdict.status == "NOT YET" and "leaves it" in verdict.message, verdict


# --- the decision --------------------------------------------------------------------------------

def test_the_outline_numbers_its_slots(capsys):
    lesson04.outline()
    shown = capsys.readouterr().out
    assert all(f"[{s}]" in shown for s in range(1, 7)) and "shared" not in shown


def test_the_right_decision_passes_with_its_consequence():
    verdict = lesson04.check_dweight_home("shared", {2, 5})
    assert verdict.passed, verdict
    device, _ = gpu.target_facts_or_fallback()
    blocks = ladder.plan("v3_smem", 8192, 1024, device)[0].grid
    assert f"{blocks * 1024:,}" in verdict.message and "9,984" in verdict.message
    assert lesson04.check_dweight_home(" Shared", [5, 2]).passed


@pytest.mark.parametrize("home,barriers,why", [
    ("registers", {2, 5}, "spill to local memory"),
    ("global", {2, 5}, "v2's choice"),
    ("shared", {5}, "after the zeroing"),
    ("shared", {2}, "before the block's last warp has added"),
    ("shared", {2, 4, 5}, "never reach hangs"),
    ("shared", {2, 3, 5}, "inside the column loop"),
    ("shared", {1, 2, 5}, "nothing yet to wait for"),
    ("shared", {2, 5, 6}, "after the last step"),
    ("shared", {2, 7}, "a set of numbers among"),
    ("local", {2, 5}, "give one of"),
    (..., ..., "home:"),
    ("shared", ..., "barriers:"),
])
def test_each_likely_wrong_decision_says_why(home, barriers, why):
    verdict = lesson04.check_dweight_home(home, barriers)
    assert verdict.status == "NOT YET" and why in verdict.message, verdict


# --- the kernel exercise and the question --------------------------------------------------------

def _exercise_text():
    [at] = tagged(cells(STEM), "kernel-exercise")
    return at, ast.parse(text(cells(STEM)[at])).body[0].value.value


def test_v3_is_written_whole_and_nothing_above_gives_a_line_of_it():
    at, solution = _exercise_text()
    written = [ln for ln in student.solution_lines(solution) if ln.strip()]
    assert len(written) >= 20
    above = shown_above(cells(STEM), at)
    leaked = [ln.strip() for ln in written if len(ln.strip()) >= 12 and ln.strip() in above]
    assert not leaked, leaked
    assert "A __syncthreads() must follow" not in above  # common.cuh's comment on the barrier


@pytest.mark.parametrize("answer,why", [(100, "every warp slot"), (12.5, "one block's warps"),
                                        (32, "a number of warps"), (47.5, "near what the profile"),
                                        (75, "count the warps"), (None, "replace None")])
def test_the_occupancy_cap(answer, why):
    device, _ = gpu.target_facts_or_fallback()
    per_sm = ladder.blocks_per_sm("v3_smem", 1024, device)
    cap = 100 * per_sm * 8 / (device.max_threads_per_multiprocessor // 32)
    assert lesson04.check_v3_occupancy_cap(cap).passed
    if answer in (32, 12.5, 47.5) and abs(cap - 50) > 0.5:
        pytest.skip("the wrong answers are this GPU's figures of a 64-slot SM")
    verdict = lesson04.check_v3_occupancy_cap(answer)
    assert verdict.status == "NOT YET" and why in verdict.message, verdict


def test_the_lesson_diagnoses_before_it_explains():
    investigation_order(STEM)
    all_cells = cells(STEM)
    [diagnosis] = tagged(all_cells, "diagnosis")
    above = "\n".join(text(c) for c in all_cells[:diagnosis] if c["cell_type"] == "markdown")
    for cause in ("atomics on", "L2 applies", "global atomics", "one global atomic"):
        assert cause not in above, cause
