"""The course's figures (CPU): a figure one lesson draws lives in that lesson's home and the ones
several draw in ``rl.plots``, none is defined twice, the figures of the bench and of lessons 09-13
draw from made-up rows, both ways of making a figure agree, and the figures of lessons 00-08 and
the charts several of them draw come out at the course's size."""
import dataclasses
import inspect
import json
import re

import numpy as np
import pytest
from _lesson_support import small_figure as _small
from matplotlib.figure import Figure

from rmsnorm_lessons import lessons
from rmsnorm_lessons.core import gpu, ladder
from rmsnorm_lessons.course import plots, registry
from rmsnorm_lessons.inspection import nsight
from rmsnorm_lessons.lessons import (lesson00, lesson01, lesson03, lesson08, lesson09, lesson10,
                                     lesson11, lesson13)
from rmsnorm_lessons.speed import bench


def _rows():
    return [bench._timing(name, N, C, [ms] * 3, 6 * N * C, 4000.0)
            for name, ms in (("v6_last_block", 0.2), ("v7_fast", 0.1)) for N, C in ((8192, 1024),
                    (4096, 4096))]


def _figure_functions(module) -> set[str]:
    """The public functions defined in ``module`` that draw a figure (every figure of the course is
    made by one of the two helpers of ``rl.plots``)."""
    return {name for name, value in vars(module).items() if inspect.isfunction(value)
            and value.__module__ == module.__name__ and name[0] != "_"
            and re.search(r"\b_(outside_pyplot|figure)\(", inspect.getsource(value))}


def _calls_by_lesson() -> dict[str, set[str]]:
    """lesson number -> the names its notebook calls as ``plots.X(`` or ``lessonNN.X(``."""
    found = {}
    for lesson in registry.LESSONS:
        nb = json.loads((registry.notebook_dir() / lesson.notebook).read_text())
        text = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
        found[lesson.number] = set(re.findall(r"(?:plots|lesson\d\d)\.(\w+)\(", text))
    return found


#: shared figures a widget draws (rmsnorm_lessons.course.widgets)
WIDGET_FIGURES = {"access_pattern", "shared_memory_chart"}
#: shared figures a course helper draws for the lessons that call it: profile_diff is drawn by
#: rl.investigate.what_changed (lessons 03-10)
HELPER_FIGURES = {"profile_diff": "what_changed("}


def test_a_figure_one_lesson_draws_lives_in_that_lessons_home():
    calls = _calls_by_lesson()
    for name in _figure_functions(plots):
        users = sorted(n for n, used in calls.items() if name in used)
        assert len(users) >= 2 or name in WIDGET_FIGURES or name in HELPER_FIGURES, (
            f"rl.plots.{name} is drawn by lesson(s) {users} only: it belongs in that lesson's home")
    for number, names in calls.items():
        own = lessons.home(f"lesson{number}")
        for other in range(14):
            if f"{other:02d}" == number:
                continue
            theirs = _figure_functions(lessons.home(f"lesson{other:02d}"))
            assert not names & theirs, \
                f"lesson {number} draws lesson {other:02d}'s {names & theirs}"
        assert own is not None


def test_no_figure_is_defined_twice():
    homes = {}
    modules = [plots] + [lessons.home(f"lesson{n:02d}") for n in range(14)] + [
        lessons.home("lesson09.plots"), lessons.home("lesson10.plots"),
        lessons.home("lesson11.plots"), lessons.home("lesson13.plots")]
    for module in modules:
        for name in _figure_functions(module):
            homes.setdefault(name, set()).add(module.__name__)
    assert all(len(where) == 1 for where in homes.values()), homes


def test_both_ways_of_making_a_figure_have_the_course_size():
    outside, ax = plots._outside_pyplot()
    inside, _ = plots._figure()
    assert isinstance(outside, Figure) and ax is not None
    for fig in (outside, inside):
        assert fig.dpi == plots.DPI and tuple(fig.get_size_inches()) == pytest.approx(plots.FIGSIZE)
    two = plots._outside_pyplot(ncols=2)[1]
    assert len(two) == 2


def test_the_bench_figures_draw_from_timing_rows():
    rows = _rows()
    for fig in (plots.bandwidth_bars(rows), plots.speed_of_light(rows, 4000.0),
                lesson11.floor_and_fixed([(8192, 1024), (4096, 4096)], 4000.0),
                lesson11.fixed_cost({"v7_fast": [(1024, 0.017), (16384, 0.142)]}, C=1024),
                lesson10.v7_row_layout(2048)):
        assert isinstance(fig, Figure) and fig.dpi == plots.DPI


def test_the_lesson_13_figures_draw():
    profile = nsight.Profile("v3_smem", "rmsnorm_backward_v3", (8192, 1024), 80.0, 60.0, 12.5,
                             {"long_scoreboard": 3.0, "barrier": 1.0})
    assert isinstance(lesson13.profile_bars([profile]), Figure)
    assert isinstance(lesson13.seed_loop_rows(8200, 768, device=gpu.H200), Figure)


def test_the_fp32_peak_from_device_facts():
    # the H200's saved facts: 132 SMs x 128 FP32 lanes x 2 FLOPs per FMA x 1.98 GHz
    assert gpu.fp32_peak_flops(gpu.H200) == pytest.approx(132 * 128 * 2 * 1.98e9)
    t4 = dataclasses.replace(gpu.H200, compute_capability=(7, 5), multiprocessors=40,
                             clock_khz=1_590_000)
    assert gpu.fp32_peak_flops(t4) == pytest.approx(40 * 64 * 2 * 1.59e9)
    assert gpu.fp32_peak_flops(dataclasses.replace(gpu.H200, clock_khz=0)) is None
    assert gpu.fp32_peak_flops(dataclasses.replace(gpu.H200, compute_capability=(6, 1))) is None


def test_the_roofline_draws_from_made_up_numbers():
    fig = lesson00.roofline(copy_gbps=1000.0, peak_flops=20e12, intensity=0.7, name="made up")
    assert isinstance(fig, Figure) and fig.dpi == plots.DPI
    assert max(fig.get_size_inches()) <= plots.FIGSIZE[0]
    right_of_ridge = lesson00.roofline(copy_gbps=1000.0, peak_flops=1e12, intensity=50.0)
    assert isinstance(right_of_ridge, Figure)
    with pytest.raises(ValueError):
        lesson00.roofline(copy_gbps=0.0, peak_flops=1e12, intensity=1.0)


def test_the_memory_levels_draw_from_a_chase_and_the_device_facts():
    from rmsnorm_lessons.lessons.lesson09 import inflight

    chase = inflight.Chase(l1_ns=30.0, l2_ns=150.0, dram_ns=330.0)
    fig = lesson09.memory_levels(chase, gpu.H200)
    assert isinstance(fig, Figure) and fig.dpi == plots.DPI
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == ["registers", "L1 + shared", "L2", "HBM"]
    texts = " | ".join(t.get_text() for t in ax.texts)
    assert "30 ns" in texts and "150 ns" in texts and "330 ns" in texts
    assert "60 MiB" in texts and "228 KiB" in texts  # the facts' L2 and shared memory per SM
    assert len(ax.patches) == 3  # registers: no load, no bar
    assert isinstance(lesson09.memory_levels(chase), Figure)  # without facts: no capacities
    with pytest.raises(ValueError):
        lesson09.memory_levels(inflight.Chase(l1_ns=0.0, l2_ns=150.0, dram_ns=330.0))


def _opening(version, ms, dram, occupancy, stalls, source="measured now on a made-up GPU"):
    from rmsnorm_lessons.course import investigate

    timing = bench._timing(version, 8192, 1024, [ms] * 3, 16 * 8192 * 1024, 3000.0)
    profile = nsight.Profile(version, "k", (8192, 1024), dram, occupancy, ms * 900, stalls)
    return investigate.Opening(version, (8192, 1024), None, timing, profile, source=source)


def test_profile_diff_draws_from_two_made_up_openings():
    from rmsnorm_lessons.course import investigate

    before = _opening("v1_naive", 3.2, 1.8, 12.4, {"long_scoreboard": 9.9, "wait": 0.1})
    after = _opening("v2_warp", 0.27, 21.1, 92.0, {"long_scoreboard": 9.8, "lg_throttle": 0.2,
                                                   "unlisted": 0.5})
    change = investigate.what_changed(before, after, show=False)
    fig = change.figure
    assert isinstance(fig, Figure) and fig.dpi == plots.DPI
    assert tuple(fig.get_size_inches() * fig.dpi) == (512, 224)
    times, shares, stalls = fig.axes[:3]
    assert [round(b.get_height(), 2) for b in times.patches] == [3.2, 0.27]
    assert len(shares.patches) == 4 and shares.get_ylim()[0] == 0
    from matplotlib.colors import to_hex

    handles, labels = stalls.get_legend_handles_labels()
    colours = {label: to_hex(h.patches[0].get_facecolor()) for h, label in zip(handles, labels)}
    # the same reason has the same colour in every lesson's picture
    assert colours["long_scoreboard"] == plots.STALL_COLORS["long_scoreboard"]
    assert colours["unlisted"] == plots.STALL_COLORS["unlisted"] and "wait" in colours


def test_the_ladder_roofline_draws_from_made_up_profiles():
    def made_up(version, read, written, us):
        return nsight.Profile(version, "k", (16384, 2048), 50.0, 50.0, us, {},
                              dram_read_bytes=read, dram_write_bytes=written)
    n = 16384 * 2048
    ladder = [made_up("v3_smem", 12 * n, 4 * n, 400.0), made_up("v4_vec_bf16", 6 * n, 2 * n, 110.0),
              nsight.Profile("v1_naive", "k", (16384, 2048), 2.0, 12.0, 7000.0, {})]
    rows = lesson13.ladder_rows(ladder, 3000.0, 60e12)
    assert rows[0]["flop_per_byte"] == pytest.approx(11 / 16)
    assert rows[1]["gflops"] == pytest.approx(11 * n / 110e-6 / 1e9)
    assert rows[1]["pct_of_roof"] == pytest.approx(100 * rows[1]["gflops"] / (3000 * 11 / 8))
    assert rows[2]["gflops"] is None  # no bytes measured: not placed, and the title says so
    fig = lesson13.ladder_roofline(ladder, 3000.0, 60e12)
    assert isinstance(fig, Figure) and "v1_naive" in fig.axes[0].get_title()
    assert "no DRAM bytes" in lesson13.ladder_table(ladder, 3000.0, 60e12)
    with pytest.raises(ValueError, match="fp32_peak"):
        lesson13.ladder_roofline(ladder, 3000.0, 0.0)
    with pytest.raises(ValueError, match="labels"):
        lesson13.ladder_rows(ladder, 3000.0, labels=["one"])


# --- the figures several lessons draw (lessons 00, 01, 02, 03) ------------------------------------


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


def test_other_lesson_figures():
    assert isinstance(lesson00.thread_indices(20, 8), Figure)
    assert isinstance(lesson00.thread_indices(16, 8), Figure)
    a = np.linspace(-1, 1, 11)
    assert isinstance(lesson01.gradient_check(a, a + 1e-9), Figure)
    results = [dict(name="v1_naive", N=8192, C=1024, ms=3.0),
               dict(name="v2_warp", N=8192, C=1024, ms=0.25),
               dict(name="v1_naive", N=16384, C=2048, ms=12.0),
               dict(name="v2_warp", N=16384, C=2048, ms=0.9)]
    assert isinstance(lesson03.speedup_bars(results), Figure)
    with pytest.raises(ValueError, match="baseline"):
        lesson03.speedup_bars(results, baseline="v9")


# --- the figures several lessons draw (lessons 04-08) ---------------------------------------------


def test_partials_and_ticket_figures():
    _small(plots.partials_reduction())
    _small(plots.partials_reduction(rows=5, warps_per_block=1, blocks=4, channels=3))
    for blocks in (1, 2, 8, 20):
        fig = _small(lesson08.ticket_timeline(blocks=blocks, seed=blocks))
        labels = [t.get_text() for t in fig.axes[0].texts if t.get_text().startswith("ticket")]
        assert sorted(labels,
                      key=lambda s: int(s.split()[1])) == [f"ticket {k}" for k in range(blocks)]


@pytest.mark.parametrize("version", ladder.with_shared_dweight())
@pytest.mark.parametrize("C", [1024, 16384])
def test_shared_memory_chart(version, C):
    _small(plots.shared_memory_chart(version, C=C, Cs=[256, 1024, 4096, 16384]))
