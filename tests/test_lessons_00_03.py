"""Lessons 00-03 without a GPU: their pictures, exercises (right answers pass, wrong ones fail with
a useful message), compiling a source string, and the widgets. The GPU paths are marked ``gpu``."""
from pathlib import Path

import numpy as np
import pytest
from matplotlib.figure import Figure

from rmsnorm_lessons import access, build, gpu, plots
from rmsnorm_lessons.exercises import lesson00, lesson01, lesson02, lesson03

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ["00_setup.ipynb", "01_rmsnorm_math.ipynb", "02_naive.ipynb", "03_warp_per_row.ipynb"]
needs_nvcc = pytest.mark.skipif(build.find_nvcc() is None, reason="nvcc not found")


# --- plots ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["thread_per_row", "warp_per_row", "v1_naive", "v2_warp"])
@pytest.mark.parametrize("rows,C,step,block",
                         [(32, 64, 3, 256), (16, 100, 3, 128), (5, 7, 99, 32), (64, 512, 0, 64)])
def test_access_pattern_returns_a_small_figure(layout, rows, C, step, block):
    fig = plots.access_pattern(layout, rows=rows, C=C, step=step, block_size=block)
    assert isinstance(fig, Figure)
    assert fig.dpi == plots.DPI and fig.get_size_inches()[0] <= plots.FIGSIZE[0]


def test_access_pattern_rejects_bad_arguments():
    with pytest.raises(ValueError, match="layout"):
        plots.access_pattern("row_per_block")
    with pytest.raises(ValueError, match="block_size"):
        plots.access_pattern(block_size=48)


def test_touched_elements_follow_the_kernels_indexing():
    v1 = access.touched_elements("thread_per_row", N=40, C=64, step=5)
    assert v1 == [(t, t, 5) for t in range(40)]
    v2 = access.touched_elements("warp_per_row", N=2, C=40, step=1)  # columns 32..39 only
    assert v2 == [(w * 32 + lane, w, 32 + lane) for w in range(2) for lane in range(8)]
    assert access.touched_elements("thread_per_row", N=4, C=8, step=8) == []


@pytest.mark.parametrize("layout,C,step,sectors", [
    ("thread_per_row", 1024, 0, 32), ("thread_per_row", 4, 0, 16), ("thread_per_row", 8, 3, 32),
    ("warp_per_row", 1024, 0, 4), ("warp_per_row", 1024, 7, 4), ("warp_per_row", 300, 9, 2),
    ("warp_per_row", 8, 0, 1),
])
def test_warp_sectors(layout, C, step, sectors):
    assert access.warp_sectors(layout, C, step) == sectors


def test_butterfly_values_sum_in_every_lane():
    x = np.arange(32.0)
    steps = access.butterfly_values(x)
    assert steps.shape == (6, 32)
    assert np.all(steps[-1] == x.sum())
    four = access.butterfly_values(x, offsets=(16, 8, 4, 2))[-1]
    assert four[0] == sum(range(0, 32, 2)) and four[1] == sum(range(1, 32, 2))


@pytest.mark.parametrize("offsets,highlight",
                         [((16, 8, 4, 2, 1), 0), ((16, 8, 4, 2), 5), ((1, 2, 4, 8, 16), None)])
def test_butterfly_figure(offsets, highlight):
    assert isinstance(plots.butterfly(offsets, highlight), Figure)


def test_other_lesson_figures():
    assert isinstance(plots.thread_indices(20, 8), Figure)
    assert isinstance(plots.thread_indices(16, 8), Figure)
    a = np.linspace(-1, 1, 11)
    assert isinstance(plots.gradient_check(a, a + 1e-9), Figure)
    results = [dict(name="v1_naive", N=8192, C=1024, ms=3.0),
               dict(name="v2_warp", N=8192, C=1024, ms=0.25),
               dict(name="v1_naive", N=16384, C=2048, ms=12.0),
               dict(name="v2_warp", N=16384, C=2048, ms=0.9)]
    assert isinstance(plots.speedup_bars(results), Figure)
    with pytest.raises(ValueError, match="baseline"):
        plots.speedup_bars(results, baseline="v9")


# --- exercises ------------------------------------------------------------------------------------


def test_lesson00_grid_and_bytes():
    assert lesson00.check_grid(1_000_003, 256, (1_000_003 + 255) // 256)
    assert lesson00.check_grid(1024, 256, 4)
    wrong = lesson00.check_grid(1_000_003, 256, 1_000_003 // 256)
    assert not wrong and "rounds down" in wrong.message
    assert not lesson00.check_grid(100, 8, 20)
    assert "replace the ..." in lesson00.check_grid(100, 8, ...).message
    assert lesson00.check_bytes(10, 80)
    assert "reads x and writes y" in lesson00.check_bytes(10, 40).message
    assert not lesson00.check_bytes(10, 120)


def _term2_right(dout, inp, weight, rstd):
    norm = inp * rstd[:, None]
    dnorm = weight * dout
    return -rstd[:, None] * norm * np.mean(dnorm * norm, axis=1, keepdims=True)


def test_lesson01_right_answer_passes():
    verdict = lesson01.check_term2(_term2_right)
    assert verdict.passed, verdict.message
    assert str(verdict).startswith("PASS")


@pytest.mark.parametrize("wrong,expect", [
    (lambda d, x, w, r: -_term2_right(d, x, w, r), "sign"),
    (lambda d, x, w, r: _term2_right(d, x, w, r) / r[:, None], "rstd in front is missing"),
    (lambda d, x, w, r: _term2_right(d, x, w, r) * x.shape[1], "sum"),
    (lambda d, x, w, r: -r[:, None] * (x * r[:, None])
     * np.mean(w * d * x * r[:, None], axis=0, keepdims=True), "axis=1"),
    (lambda d, x, w, r: -r[:, None] * (x * r[:, None]) * np.mean(w * d * x * r[:, None], axis=1),
     "keepdims"),
    (lambda d, x, w, r: np.mean(w * d * x * r[:, None], axis=1), "shape"),
    (lambda d, x, w, r: None, "returned None"),
    (lambda d, x, w, r: np.zeros_like(x), "expected"),
])
def test_lesson01_wrong_answers_fail_with_a_reason(wrong, expect):
    verdict = lesson01.check_term2(wrong)
    assert not verdict.passed
    assert expect in verdict.message, verdict.message


def test_lesson01_skeleton_fails():
    def term2(dout, inp, weight, rstd):
        raise NotImplementedError

    assert "NotImplementedError" in lesson01.check_term2(term2).message
    assert not lesson01.check_term2("not a function")


def test_lesson02_atomics():
    assert lesson02.check_atomics(8192, 1024, 8192 * 1024, 8192)
    assert lesson02.check_atomics(7, 13, 91.0, 7)
    wrong = lesson02.check_atomics(8192, 1024, 8192, 1024)
    assert not wrong and "one atomic per row" in wrong.message and "count rows" in wrong.message
    assert not lesson02.check_atomics(8192, 1024, 8192 * 1024, 8192 * 1024)
    assert "replace the ..." in lesson02.check_atomics(8192, 1024, ..., ...).message
    assert "whole number" in lesson02.check_atomics(8192, 1024, 1.5, 8192).message


def test_lesson02_sectors():
    assert lesson02.check_sectors(32, 4)
    wrong = lesson02.check_sectors(4, 32)
    assert not wrong and "a whole row apart" in wrong.message and "share sectors" in wrong.message
    assert not lesson02.check_sectors(32, 1)
    assert not lesson02.check_sectors(1, 4)


def _xor_reduction(x, offsets=(16, 8, 4, 2, 1)):
    x = np.asarray(x, np.float64).reshape(-1, 32)
    lanes = np.arange(32)
    for o in offsets:
        x = x + x[:, lanes ^ o]
    return x.ravel()


def _shfl_down_reduction(x, broadcast=False):
    x = np.asarray(x, np.float64).reshape(-1, 32)
    lanes = np.arange(32)
    for o in (16, 8, 4, 2, 1):
        # out of range: a lane gets its own value
        x = x + x[:, np.where(lanes + o < 32, lanes + o, lanes)]
    if broadcast:
        x = np.repeat(x[:, :1], 32, axis=1)
    return x.ravel()


@pytest.mark.parametrize("reduce,passes,expect", [
    (_xor_reduction, True, "every lane"),
    (lambda x: _shfl_down_reduction(x, broadcast=True), True, "every lane"),
    (lambda x: _xor_reduction(x, (16, 8, 4, 2)), False, "16 lanes, not 32"),
    (lambda x: _xor_reduction(x, (8, 4, 2, 1)), False, "5 (offsets 16, 8, 4, 2, 1)"),
    (_shfl_down_reduction, False, "lane 0 holds the sum"),
    (lambda x: np.asarray(x, np.float64), False, "never exchanged"),
    (lambda x: _xor_reduction(x, (16, 8, 4, 2, 1, 1)), False, "more than once"),
    (lambda x: np.where(np.arange(np.size(x)) % 32 == 3, np.nan, _xor_reduction(x)), False, "NaN"),
])
def test_lesson03_judge_names_the_mistake(reduce, passes, expect):
    x = lesson03.random_input()
    verdict = lesson03.judge(reduce(lesson03.one_hot_input()), x, reduce(x))
    assert verdict.passed == passes, verdict.message
    assert expect in verdict.message, verdict.message


def test_lesson03_static_checks_need_no_compiler():
    assert "never exchange" in lesson03.check_warp_sum(lesson03.STARTER).message
    assert "only the body" in lesson03.check_warp_sum("__device__ float warp_sum(float v) { return "
                                                      "v; }").message
    assert not lesson03.check_warp_sum("")
    assert not lesson03.check_warp_sum(42)


@needs_nvcc
def test_lesson03_right_body_compiles_here():
    # without a GPU the best a check can say is NOT VERIFIED (it compiled and its SASS looks right)
    verdict = lesson03.check_warp_sum(lesson03.SOLUTION)
    if gpu.available():
        assert verdict.passed, verdict.message
    else:
        assert not verdict.passed and str(verdict).startswith("NOT VERIFIED"), verdict
        assert "SHFL.BFLY" in verdict.message, verdict.message


@needs_nvcc
def test_lesson03_compile_error_points_at_the_learners_line():
    verdict = lesson03.check_warp_sum("\n    float t = __shfl_xor_sync(0xffffffff, value, 1)\n    "
                                      "return t;\n")
    assert not verdict.passed
    assert "your_warp_sum(2)" in verdict.message, verdict.message


@needs_nvcc
def test_compile_source_reports_resources_and_errors():
    compiled = build.compile_source('extern "C" __global__ void k(float* x) { x[threadIdx.x] *= '
                                    '2.0f; }')
    assert compiled.kind == "cubin" and compiled.binary
    assert compiled.resources["k"].registers > 0
    ptx = build.compile_source('#include "common.cuh"\nextern "C" __global__ void k(float* x) '
                               '{ x[0] = warp_reduce_sum(x[threadIdx.x]); }', kind="ptx")
    assert b"shfl.sync.bfly" in ptx.binary
    with pytest.raises(build.CompileError, match="error"):
        build.compile_source("this is not CUDA;")
    with pytest.raises(ValueError):
        build.compile_source("", name="../x")


FOUR_STEPS = """
    for (int offset = 16; offset > 1; offset /= 2)
        value += __shfl_xor_sync(0xffffffff, value, offset);
    return value;
"""
SHFL_DOWN = """
    for (int offset = 16; offset > 0; offset /= 2)
        value += __shfl_down_sync(0xffffffff, value, offset);
    return value;
"""
SHFL_DOWN_BROADCAST = SHFL_DOWN.replace("return value;",
                                        "return __shfl_sync(0xffffffff, value, 0);")


@pytest.mark.gpu
@pytest.mark.parametrize("body,passes,expect", [
    (lesson03.SOLUTION, True, "ran it on the GPU"),
    (SHFL_DOWN_BROADCAST, True, "ran it on the GPU"),
    (FOUR_STEPS, False, "16 lanes, not 32"),
    (SHFL_DOWN, False, "lane 0 holds the sum"),
])
def test_lesson03_on_the_gpu(body, passes, expect):
    verdict = lesson03.check_warp_sum(body)
    assert verdict.passed == passes, verdict.message
    assert expect in verdict.message, verdict.message


# --- widgets --------------------------------------------------------------------------------------


def test_access_explorer_builds_and_redraws_without_a_gpu():
    from rmsnorm_lessons import widgets

    e = widgets.access_explorer("thread_per_row", N=32, C=64, block_size=256)
    assert isinstance(e.figure(), Figure)
    assert "<b>32</b>" in e.note.value
    e.layout.value = "warp_per_row"
    assert e.step.max == 1 and "<b>4</b>" in e.note.value
    e.C.value = 300
    e.step.value = 9
    e.layout.value = "thread_per_row"
    assert e.step.max == 299
    assert isinstance(e.figure(), Figure)


def test_check_and_time_builds_without_a_gpu():
    from rmsnorm_lessons import gpu, widgets

    c = widgets.check_and_time(["v1_naive", "v2_warp"], N=64, C=32)
    assert c.version.value == "v1_naive"
    assert widgets.check_and_time(["v1_naive", "v2_warp"],
                                  version="v2_warp").version.value == "v2_warp"
    with pytest.raises(ValueError):
        widgets.check_and_time(["v1_naive", "v7_imaginary"])
    if gpu.why_unavailable() is not None:
        text = c.run()
        assert text.startswith("Nothing was launched") and text.count("\n") == 0
        c._clicked()  # the button's handler: prints that sentence into the control's output area


@pytest.mark.gpu
def test_check_and_time_runs_on_the_gpu():
    from rmsnorm_lessons import widgets

    c = widgets.check_and_time(["v2_warp"], N=257, C=96, repeats=3)
    text = c.run()
    assert "OK" in text and "GB/s" in text, text
    assert len(c.results) == 1


