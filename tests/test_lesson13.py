"""Lesson 13 (finding bugs), on the CPU but for its GPU tests: the three bugs (built for sm_90)
and their tools; the questions (the row that wraps, reading a profile): each check passes the right
answer, says NOT YET to a plausible wrong one with a reason, and asks to replace None; the kernel
exercise (the seed's row loop made uniform) and its ladder: the splice into v6, where nvcc's errors
point, the shapes that split a block, the solution being the shipped row pass, and the ladder's
openings and roof. The reports its tools print are read in tests/test_lesson13_tools.py."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from test_kernel_exercises import kernel_text

from rmsnorm_lessons.core import build, gpu, ladder
from rmsnorm_lessons.course import student
from rmsnorm_lessons.course.checking import kernel as kernel_check
from rmsnorm_lessons.inspection import nsight, sanitizer
from rmsnorm_lessons.lessons import lesson13
from rmsnorm_lessons.lessons.lesson13 import bugs, exercise

needs_nvcc = pytest.mark.skipif(build.find_nvcc() is None, reason="nvcc not found")


@pytest.fixture(autouse=True, scope="module")
def _forget_bug_rungs():
    yield
    for name in bugs.BUGS:
        if name in ladder.VERSIONS:
            ladder.unregister(name)


# --- the bugs -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", bugs.BUGS)
def test_each_bug_is_one_edit_of_its_shipped_rung(name):
    bug = bugs.BUGS[name]
    d = bugs.diff(name)
    assert d.startswith(f"--- kernels/{bug.shipped}.cu\n+++ {name}.cu\n")
    removed = [ln for ln in d.splitlines() if ln.startswith("-") and not ln.startswith("---")]
    added = [ln for ln in d.splitlines() if ln.startswith("+") and not ln.startswith("+++")]
    assert removed and len(removed) <= 3 and len(added) <= 2  # a small edit, shown whole
    assert bugs.source(name) != build.kernel_source(bug.shipped)
    assert bug.tool in sanitizer.TOOLS


def test_the_tail_bug_is_in_the_update_loop():
    src = bugs.source("bug_tail_v2")
    # the dot product is intact
    assert src.count("c <= C") == 1 and src.index("c < C") < src.index("c <= C")


def test_an_edit_that_no_longer_applies_says_so(monkeypatch):
    monkeypatch.setitem(bugs.BUGS, "bug_race_v5", bugs.BUGS["bug_race_v5"].__class__(
        **{**bugs.BUGS["bug_race_v5"].__dict__, "old": "no such text"}))
    with pytest.raises(ValueError, match="applies 0 times"):
        bugs.source("bug_race_v5")
    with pytest.raises(ValueError, match="bug must be one of"):
        bugs.get("bug_nothing")


@needs_nvcc
@pytest.mark.parametrize("name,barriers",
                         [("bug_race_v5", 1), ("bug_tail_v2", 0), ("bug_seed_loop_v6", None)])
def test_each_bug_builds_for_sm_90(name, barriers):
    rung = bugs.rung(name)
    res = build.compile_file(rung, "sm_90").resources[rung.kernels[0]]
    assert res.registers > 0
    if barriers is not None:
        assert res.barriers == barriers  # v3 keeps the barrier after zeroing; v2 has none


def test_bug_shapes_are_what_the_lesson_says():
    assert bugs.BUGS["bug_seed_loop_v6"].shape == (8200, 768)
    grid = ladder.plan("v6_last_block", 8200, 768)[0].grid  # the H200's facts without a GPU
    warps = ladder.get("v6_last_block").block_size // 32
    assert 8200 % (grid * warps) != 0  # some block holds warps with one row and warps with two


def test_without_compute_sanitizer_run_says_so(monkeypatch):
    monkeypatch.setattr(build, "find_tool", lambda tool: None)
    with pytest.raises(sanitizer.ToolMissing, match="compute-sanitizer was not found"):
        bugs.sanitize("bug_race_v5")


@pytest.mark.gpu
@pytest.mark.skipif(sanitizer.find() is None, reason="compute-sanitizer not installed")
@pytest.mark.parametrize("name", bugs.BUGS)
def test_each_bugs_tool_finds_it_on_the_gpu(name):
    report = bugs.sanitize(name)
    assert report.errors and report.errors > 0, report.output[-3000:]
    shipped = bugs.BUGS[name].shipped
    clean = sanitizer.run(ladder.get(shipped), bugs.BUGS[name].tool, bugs.BUGS[name].shape)
    assert clean.errors == 0, clean.output[-3000:]


# --- the questions --------------------------------------------------------------------------------

NUMBERS = [(lesson13.check_dram_percent, 62.5, (0.625, 31.25, 6.25)),
           (lesson13.check_occupancy_cap, 37.5, (0.375, 75, 18.75)),
           (lesson13.check_blocks_for_occupancy, 6, (5, 4, 7, 3)),
           (lesson13.check_wrap_row, 131072, (131071, 262144, 65536))]
CHECKS = [c for c, _, _ in NUMBERS]


@pytest.mark.parametrize("check, right, wrongs", NUMBERS, ids=lambda x: getattr(x, "__name__", ""))
def test_right_passes_and_wrong_is_not_yet(check, right, wrongs):
    verdict = check(right)
    assert verdict.passed, verdict.message
    for wrong in wrongs:
        verdict = check(wrong)
        assert verdict.status == "NOT YET" and len(verdict.message) > 20, (wrong, verdict.message)
        # the reason, not the answer
        assert f"{right}" not in verdict.message.split() and f'"{right}"' not in verdict.message


@pytest.mark.parametrize("check", CHECKS + [lesson13.check_dram_peak])
def test_none_asks_to_replace_it(check):
    verdict = check(None)
    assert verdict.status == "NOT YET" and verdict.message.startswith("replace None")


def test_a_fraction_asks_for_percent_and_the_blocks_say_how_short():
    assert "in %" in lesson13.check_dram_percent(0.625).message
    assert "in %" in lesson13.check_occupancy_cap(0.375).message
    assert "under the 32" in lesson13.check_blocks_for_occupancy(5).message
    assert "37.5 %" in lesson13.check_blocks_for_occupancy(4).message
    assert lesson13.blocks_for(50, 192) == 6 and lesson13.blocks_for(50, 256) == 4
    # the first row that wraps (moved from lesson 08 with its reasons)
    assert "still fits" in lesson13.check_wrap_row(131071).message
    assert "signed" in lesson13.check_wrap_row(262144).message
    assert "a row number" in lesson13.check_wrap_row(None).message


def test_q3s_reading_is_what_the_packages_rule_prints():
    q3 = nsight.Profile("x", "k", (1, 1), 30.0, 19.0, 1.0, {"long_scoreboard": 8.0, "wait": 2.0})
    assert nsight.reading(q3) == ("latency-bound: DRAM at 30 % of its peak, warps mostly waiting "
                                  "on long_scoreboard (global loads, 80 % of stalls) at 19 % "
                                  "achieved occupancy")
    assert 62.5 >= nsight.MEMORY_BOUND_PCT  # Q2's launch is on the memory-bound side


def _opening(dram_bytes, duration_us=143.3, dram_pct=58.5):
    profile = SimpleNamespace(dram_bytes=dram_bytes, duration_us=duration_us, dram_pct=dram_pct,
                              shape=(16384, 2048))
    return SimpleNamespace(profile=profile, source="saved on NVIDIA H100 80GB HBM3, 2026-12-05",
                           timing=SimpleNamespace(copy_gbps=2993.0))


def test_the_dram_peak_from_v6s_profile(monkeypatch):
    monkeypatch.setattr(gpu, "copy_bandwidth_or_saved", lambda: (2997.0, "saved"))
    nominal = ladder.get("v6_last_block").bytes_moved(16384, 2048)
    # the saved run counted no DRAM bytes: the bytes v6 must move
    o = _opening(None)
    want, moved, where = lesson13.dram_peak(o.profile)
    assert moved == nominal and "counted none" in where
    assert want == pytest.approx(nominal / 143.3e-6 / 0.585 / 1e9)
    v = lesson13.check_dram_peak(want, opening=o)
    assert v.passed and "above the copy bandwidth" in v.message and "H100" in v.message, v
    assert "(2,993 GB/s)" in v.message  # the copy of the card that measured the profile
    achieved = nominal / 143.3e-6 / 1e9
    for wrong, says in [(achieved, "what v6 achieved"), (want * 100, "divide by 100"),
                        (want / 100, "58 % is 0.58"), (want * 1e3, "powers of ten"),
                        (2993.0, "copy bandwidth"), (want * 1.5, "rate over the peak")]:
        v = lesson13.check_dram_peak(wrong, opening=o)
        assert v.status == "NOT YET" and says in v.message, (wrong, v.message)
    # a profile that counted its DRAM bytes: those
    o = _opening(300e6)
    assert lesson13.check_dram_peak(300e6 / 143.3e-6 / 0.585 / 1e9, opening=o).passed
    with pytest.raises(ValueError, match="no duration or DRAM %"):
        lesson13.dram_peak(_opening(None, duration_us=None).profile)


# --- the kernel exercise and the ladder -----------------------------------------------------------


@pytest.fixture(autouse=True, scope="module")
def _forget_learners_rungs():
    """The checks register yours_seed_loop; later test modules see the shipped ladder only."""
    yield
    for name in [v for v in ladder.VERSIONS if v.startswith("yours_")]:
        ladder.unregister(name)


def _code(text):
    return [ln.strip() for ln in kernel_check.strip_comments(text).splitlines() if ln.strip()]


def test_the_solution_is_the_shipped_row_pass_and_the_skeleton_the_seeds_loop():
    text = kernel_text("13_finding_bugs")
    header = build.kernel_source(exercise.HEADER)
    start = header.index(exercise.START)
    own = header[start:header.index("\n}\n", start) + 3]
    # the learner's copy runs in v6 alone: the seed's rounding order, not the header's choice of two
    own = own.replace("dnorm_norm_mean = seed_rounding ? sum / C * r : sum * r / C;",
                      "dnorm_norm_mean = sum / C * r;")
    solution = student.solution_only(text)
    assert _code(solution)[_code(solution).index("template <bool seed_rounding>"):] == _code(own)
    skeleton = student.strip_solutions(text)
    assert "row += (long long)gridDim.x * warps" in skeleton
    assert "const bool active = true;" in skeleton
    assert "first < N" not in skeleton and "active &&" not in skeleton
    assert len(kernel_check.todo_lines(skeleton)) == 4


def test_the_splice_keeps_both_files_line_numbers():
    v6_before, v6_after, head, tail, tail_line = exercise._pieces()
    spliced = exercise.splice('#line 1 "yours"\nint x;')
    assert spliced.startswith('#line 1 "v6_last_block.cu"') and '#include "bf16_row_pass.cuh"' \
        not in spliced
    assert f'#line {tail_line} "{exercise.HEADER}"' in spliced
    header = build.kernel_source(exercise.HEADER).splitlines()
    assert header[tail_line - 1:tail_line - 1 + len(tail.splitlines())] == tail.splitlines()
    v6 = build.kernel_source(exercise.RUNG).splitlines()
    after_line = v6_before.count("\n") + 2
    assert v6[after_line - 1:] == v6_after.splitlines()


@needs_nvcc
def test_errors_point_at_the_cell_and_a_missing_function_is_named():
    text = kernel_text("13_finding_bugs")
    lines = text.split("\n")
    at = next(i for i, ln in enumerate(lines) if "const long long row = first + warp;" in ln)
    lines[at] = lines[at].replace("first + warp", "first + wrap")
    verdict = lesson13.check_seed_loop("\n".join(lines))
    assert verdict.status == "NOT YET" and f"line {at + 1}: " in verdict.message, verdict.message
    verdict = lesson13.check_seed_loop(text.replace("block_dweight_rows", "rows_of_block"))
    assert verdict.status == "NOT YET" and "keep the function block_dweight_rows" in \
        verdict.message


def test_the_split_shapes_split_a_block_of_v6s_grid():
    import dataclasses

    for device in (gpu.H200, dataclasses.replace(gpu.H200, multiprocessors=108)):
        launch = ladder.plan(exercise.RUNG, 1, 768, device)[0]
        warps = launch.block // 32
        W = launch.grid * warps
        for N, C in exercise.split_shapes(device):
            assert N > W and C % 8 == 0
            first = np.arange(W)
            rows = (N - 1 - first) // W + 1  # the seed's loop: rows of each warp of the grid
            per_block = rows.reshape(launch.grid, warps)
            assert (per_block.min(axis=1) != per_block.max(axis=1)).any(), (device.name, N)


def test_the_ladder_is_every_rung_and_v7s_register_path(monkeypatch):
    from types import SimpleNamespace

    from rmsnorm_lessons.course import investigate

    called = []

    def opening(version, N, C, config=None):
        called.append((version, N, C, config))
        return SimpleNamespace(timing=SimpleNamespace(copy_gbps=3000.0 + len(called)))

    monkeypatch.setattr(investigate, "opening", opening)
    monkeypatch.setattr(lesson13.roofline, "_PROFILED", {})
    labels, openings = lesson13.ladder()
    shipped = [r.name for r in ladder.SHIPPED]
    assert labels == shipped + ["v7_fast, register path"]
    assert [c[0] for c in called] == shipped + ["v7_fast"]
    assert all((N, C) == lesson13.LADDER_SHAPE for _, N, C, _ in called)
    assert called[-1][3] == ladder.v7_fast.Config(staged=False)
    lesson13.ladder()  # kept: no second measurement
    assert len(called) == len(labels)
    copy, peak = lesson13.roof(openings)
    assert copy == sorted(3000.0 + k for k in range(1, len(labels) + 1))[len(labels) // 2]
    assert peak == pytest.approx(gpu.fp32_peak_flops(gpu.facts_or_fallback()[0]) or
                                 gpu.fp32_peak_flops(gpu.H200))
