"""rmsnorm_lessons.plots (CPU): every figure is reachable as ``rl.plots.X`` from its lesson's
module, the figures of the bench and of lessons 10-13 draw from made-up rows, and both ways of
making a figure agree."""
import dataclasses
import importlib

import pytest
from matplotlib.figure import Figure

from rmsnorm_lessons import bench, gpu, nsight, plots

MODULES = ("figure", "lessons_00_03", "lessons_04_07", "lesson09", "lesson10", "lesson13")


def _rows():
    return [bench._timing(name, N, C, [ms] * 3, 6 * N * C, 4000.0)
            for name, ms in (("v6_last_block", 0.2), ("v7_fast", 0.1)) for N, C in ((8192, 1024),
                    (4096, 4096))]


def test_every_public_name_comes_from_one_lesson_module():
    homes = {}
    for name in MODULES:
        module = importlib.import_module(f"rmsnorm_lessons.plots.{name}")
        for attr, value in vars(module).items():
            if callable(value) and getattr(value, "__module__",
                                           "") == module.__name__ and attr[0] != "_":
                homes.setdefault(attr, []).append(name)
    assert sorted(homes) == sorted(n for n in plots.__all__ if n not in ("COPY_COLOR", "DPI",
            "FIGSIZE"))
    assert all(len(where) == 1 for where in homes.values()), homes
    for name in plots.__all__:
        assert getattr(plots, name) is not None


def test_both_ways_of_making_a_figure_have_the_course_size():
    from rmsnorm_lessons.plots import figure

    outside, ax = figure._outside_pyplot()
    inside, _ = figure._figure()
    assert isinstance(outside, Figure) and ax is not None
    for fig in (outside, inside):
        assert fig.dpi == plots.DPI and tuple(fig.get_size_inches()) == pytest.approx(plots.FIGSIZE)
    two = figure._outside_pyplot(ncols=2)[1]
    assert len(two) == 2


def test_the_bench_figures_draw_from_timing_rows():
    rows = _rows()
    for fig in (plots.bandwidth_bars(rows), plots.speed_of_light(rows, 4000.0),
                plots.floor_and_fixed([(8192, 1024), (4096, 4096)], 4000.0),
                plots.fixed_cost({"v7_fast": [(1024, 0.017), (16384, 0.142)]}, C=1024),
                plots.v7_row_layout(2048)):
        assert isinstance(fig, Figure) and fig.dpi == plots.DPI


def test_the_lesson_10_figures_draw():
    profile = nsight.Profile("v3_smem", "rmsnorm_backward_v3", (8192, 1024), 80.0, 60.0, 12.5,
                             {"long_scoreboard": 3.0, "barrier": 1.0})
    assert isinstance(plots.profile_bars([profile]), Figure)
    assert isinstance(plots.seed_loop_rows(8200, 768, device=gpu.H200), Figure)


def test_the_fp32_peak_from_device_facts():
    # the H200's saved facts: 132 SMs x 128 FP32 lanes x 2 FLOPs per FMA x 1.98 GHz
    assert gpu.fp32_peak_flops(gpu.H200) == pytest.approx(132 * 128 * 2 * 1.98e9)
    t4 = dataclasses.replace(gpu.H200, compute_capability=(7, 5), multiprocessors=40,
                             clock_khz=1_590_000)
    assert gpu.fp32_peak_flops(t4) == pytest.approx(40 * 64 * 2 * 1.59e9)
    assert gpu.fp32_peak_flops(dataclasses.replace(gpu.H200, clock_khz=0)) is None
    assert gpu.fp32_peak_flops(dataclasses.replace(gpu.H200, compute_capability=(6, 1))) is None


def test_the_roofline_draws_from_made_up_numbers():
    fig = plots.roofline(copy_gbps=1000.0, peak_flops=20e12, intensity=0.7, name="made up")
    assert isinstance(fig, Figure) and fig.dpi == plots.DPI
    assert max(fig.get_size_inches()) <= plots.FIGSIZE[0]
    right_of_ridge = plots.roofline(copy_gbps=1000.0, peak_flops=1e12, intensity=50.0)
    assert isinstance(right_of_ridge, Figure)
    with pytest.raises(ValueError):
        plots.roofline(copy_gbps=0.0, peak_flops=1e12, intensity=1.0)


def test_the_memory_levels_draw_from_a_chase_and_the_device_facts():
    from rmsnorm_lessons import inflight

    chase = inflight.Chase(l1_ns=30.0, l2_ns=150.0, dram_ns=330.0)
    fig = plots.memory_levels(chase, gpu.H200)
    assert isinstance(fig, Figure) and fig.dpi == plots.DPI
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == ["registers", "L1 + shared", "L2", "HBM"]
    texts = " | ".join(t.get_text() for t in ax.texts)
    assert "30 ns" in texts and "150 ns" in texts and "330 ns" in texts
    assert "60 MiB" in texts and "228 KiB" in texts  # the facts' L2 and shared memory per SM
    assert len(ax.patches) == 3  # registers: no load, no bar
    assert isinstance(plots.memory_levels(chase), Figure)  # without facts: no capacities
    with pytest.raises(ValueError):
        plots.memory_levels(inflight.Chase(l1_ns=0.0, l2_ns=150.0, dram_ns=330.0))
