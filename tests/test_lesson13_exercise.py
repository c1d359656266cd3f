"""Lesson 13's kernel exercise (the seed's row loop made uniform) and its ladder (CPU): the splice
into v6, where nvcc's errors point, the shapes that split a block, the solution being the shipped
row pass, and the ladder's openings and roof."""
from __future__ import annotations

import numpy as np
import pytest
from test_kernel_exercises import kernel_text, needs_nvcc

from rmsnorm_lessons.core import build, gpu, ladder
from rmsnorm_lessons.course import student
from rmsnorm_lessons.course.checking import kernel as kernel_check
from rmsnorm_lessons.lessons import lesson13
from rmsnorm_lessons.lessons.lesson13 import exercise


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
