"""rl.investigate without a GPU: the saved opening of a call and why, an opening measured (the
bench and ncu faked), a lesson's probe, what changed between two openings, and where lessons 04,
05, 07 and 08 profile the shape they time."""
from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
from _lesson_support import cells as _cells

from rmsnorm_lessons.course import investigate, saved
from rmsnorm_lessons.inspection import nsight
from rmsnorm_lessons.speed import bench

REAL_RESULTS = saved.RESULTS
NO_GPU = "No NVIDIA driver here (libcuda.so.1 is missing)"


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(investigate, "why_not_measured", lambda: NO_GPU)


def test_without_a_gpu_an_opening_is_the_saved_runs_and_says_why(no_gpu, monkeypatch):
    # the saved run (saved.RUN, the H100 run of 2026-12-06): every figure measured
    o = investigate.opening("v2_warp", 8192, 1024,
                            figures={"ablation:atomicAdd": lambda: pytest.fail("measured")})
    lines = str(o).splitlines()
    assert lines[0] == ("v2_warp at 8192x1024, saved on NVIDIA H100 80GB HBM3, 2026-12-06: run "
                        "the cell on a GPU for yours")
    assert lines[1] == f"Not measured here: {NO_GPU}."
    assert o.source == "saved on NVIDIA H100 80GB HBM3, 2026-12-06" and not o.measured_now
    assert o.timing.ms == 0.2571199983358383
    assert o.timing.ms_spread == pytest.approx(0.009013684182891484)
    assert o.profile.dram_pct == 22.04
    assert o.figures == {"ablation:atomicAdd": pytest.approx(70.3919144399898)}
    rows = dict(o.rows())
    assert rows["bench time"].startswith("0.2571 ms, 522 GB/s, 17.5 % of copy")
    assert rows["global load efficiency"] == "99.9 %"
    assert rows["without atomicAdd"] == "70.4 % of the time gone"
    assert o.figure("occupancy_pct") == 91.66
    assert o.figure("stall:long_scoreboard") == pytest.approx(97.43745815326557)
    assert o.reading().startswith("latency-bound") and "bound" not in str(o)
    # the seed run (h100-2026-12-05, from its notebooks' text): what it lacks, each row says so
    monkeypatch.setattr(saved, "RUN", "h100-2026-12-05")
    seed = investigate.opening("v2_warp", 8192, 1024,
                               figures={"ablation:atomicAdd": lambda: pytest.fail("measured")})
    assert seed.source == "saved on NVIDIA H100 80GB HBM3, 2026-12-05"
    assert seed.timing.ms == 0.2688 and math.isnan(seed.timing.ms_spread)
    assert seed.profile.dram_pct == 21.1 and seed.figures == {"ablation:atomicAdd": pytest.approx(
        100 * (1 - 0.0764 / 0.2688))}
    rows = dict(seed.rows())
    assert rows["bench time"].startswith("0.2688 ms, 499 GB/s, 16.7 % of copy")
    assert rows["global load efficiency"] == "not in the saved run"
    assert rows["without atomicAdd"] == "71.6 % of the time gone"


@pytest.mark.parametrize("name", sorted(saved.read()["opening"]))
def test_no_saved_opening_prints_its_reading(no_gpu, name):
    if name.startswith("lesson09"):
        kernel, args = name.split(":")[1].split()[0].rstrip(")").split("(")
        target = nsight.Probe("lesson09", kernel, *[int(a) for a in args.split(",") if a])
    else:
        target = name.split()[0]
    if target == "v4_interleaved":
        from rmsnorm_lessons.core import ladder
        ladder.v4_interleaved()
    N, C = map(int, name.split()[1].split("x"))
    config = None
    if "Config(" in name:
        from rmsnorm_lessons.core.ladder.v7_fast import Config
        config = Config(staged=False)
    o = investigate.opening(target, N, C, config=config)
    assert o.source.startswith("saved on") and saved.key(target, N, C, config) == name
    text = str(o)
    assert "-bound" not in text and "bound:" not in text


def test_a_call_no_run_has_saved_says_so(no_gpu):
    o = investigate.opening("v3_smem", 1000, 777, kernels=())
    assert o.timing is None and o.profile.dram_pct is None
    assert str(o).splitlines()[0] == ("v3_smem at 1000x777, not measured here, and no saved run "
                                      "has this call")
    assert dict(o.rows())["DRAM throughput"] == "no saved run has this call"


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(version="v9"), ValueError, "version must be one of"),
    (dict(kernels=("rmsnorm_backward_v7",)), ValueError, "kernels must be among v3_smem's"),
    (dict(kernels="rmsnorm_backward_v3"), TypeError, "tuple of kernel names"),
    (dict(figures={"x": "fast"}), TypeError, "figures must map names"),
    (dict(timing=3.0), TypeError, "timing must be a function"),
    (dict(N=0), ValueError, r"N \(rows\)"),
])
def test_bad_arguments_are_refused_first(no_gpu, kwargs, error, match):
    args = dict(version="v3_smem", N=8192, C=1024)
    args.update(kwargs)
    with pytest.raises(error, match=match):
        investigate.opening(args.pop("version"), args.pop("N"), args.pop("C"), **args)


# --- measured: the bench and ncu faked --------------------------------------------------------

@pytest.fixture
def fake_gpu(monkeypatch, tmp_path):
    monkeypatch.setattr(investigate, "why_not_measured", lambda: None)
    monkeypatch.setattr(investigate, "_COPY", {"gbps": 3000.0})
    monkeypatch.setattr(investigate.gpu, "facts", lambda: SimpleNamespace(name="Made-up GPU"))
    monkeypatch.setattr(saved, "RESULTS", tmp_path)
    calls = []

    def bench_version(version, N, C, copy, repeats=50, problem=None, *, config=None, **k):
        calls.append(("bench", getattr(version, "name", version), repeats))
        return bench._timing(str(version), N, C, [0.25] * 3, 16 * N * C, copy)

    def profile(target, N, C, kernel=None, *, config=None, **k):
        calls.append(("ncu", getattr(target, "name", target), kernel))
        return nsight.Profile(getattr(target, "name", target), kernel or "main", (N, C), 20.0,
                              90.0, 260.0 if kernel is None else 15.0, {"long_scoreboard": 9.0})
    monkeypatch.setattr(bench, "bench_version", bench_version)
    monkeypatch.setattr(nsight, "profile", profile)
    return calls


def test_an_opening_measured_here_is_recorded_for_the_run(fake_gpu, monkeypatch):
    import dataclasses

    # where a GPU is present, plans read its facts (v5's grid: its SM count), so the made-up GPU
    # has an H200's whole facts under its own name; here too, as on a GPU machine
    made_up = dataclasses.replace(investigate.gpu.H200, name="Made-up GPU")
    monkeypatch.setattr(investigate.gpu, "facts", lambda: made_up)
    monkeypatch.setattr(investigate.gpu, "available", lambda: True)
    monkeypatch.setenv(saved.ENV, "made-up-run")
    o = investigate.opening("v5_two_pass", 16384, 2048, kernels=("reduce_dweight_v5",),
                            figures={"differing_channels": lambda: 0, "fixed": 2.5})
    assert o.measured_now and o.source == "measured now on Made-up GPU" and o.note is None
    assert str(o).splitlines()[0] == "v5_two_pass at 16384x2048, measured now on Made-up GPU"
    assert fake_gpu == [("bench", "v5_two_pass", investigate.REPEATS), ("ncu", "v5_two_pass", None),
                        ("ncu", "v5_two_pass", "reduce_dweight_v5")]
    assert o.figures == {"differing_channels": 0.0, "fixed": 2.5}
    assert o.figure("second_kernel_us") == 15.0
    # what was recorded is what a machine without a GPU gets back
    data, label = saved.load("opening", "v5_two_pass 16384x2048", run="made-up-run")
    assert label.startswith("Made-up GPU, ")
    monkeypatch.setattr(saved, "RUN", "made-up-run")
    monkeypatch.setattr(investigate, "why_not_measured", lambda: NO_GPU)
    back = investigate.opening("v5_two_pass", 16384, 2048, kernels=("reduce_dweight_v5",))
    assert back.profile == o.profile and back.extra == o.extra and back.figures == o.figures
    assert back.timing.ms == o.timing.ms and back.source == f"saved on {label}"


def test_where_ncu_gives_no_profile_the_saved_run_is_shown(fake_gpu, monkeypatch):
    def refuse(*a, **k):
        raise nsight.ProfileError("ncu may not read this GPU's performance counters "
                                  "(ERR_NVGPUCTRPERM).")
    monkeypatch.setattr(nsight, "profile", refuse)
    monkeypatch.setattr(saved, "RESULTS", REAL_RESULTS)
    o = investigate.opening("v1_naive", 8192, 1024)
    assert o.source.startswith("saved on") and o.note == (
        "Not measured here: ncu gave no profile (ncu may not read this GPU's performance "
        "counters (ERR_NVGPUCTRPERM)).")


def test_a_probe_is_timed_by_its_lesson(fake_gpu):
    timed = SimpleNamespace(ms=0.194, gbps=2767.0, copy_gbps=3000.0)
    o = investigate.opening(nsight.Probe("lesson09", "scale_f128_x4", 2), 64 * 2**20, 1,
                            timing=lambda: timed)
    assert o.version == "scale_f128_x4" and o.timing.ms == 0.194
    assert o.timing.bytes == round(2767.0 * 0.194 * 1e6)
    assert ("bench", "scale_f128_x4", investigate.REPEATS) not in fake_gpu
    with pytest.raises(ValueError, match="a probe has one kernel"):
        investigate.opening(nsight.Probe("lesson09", "scale_f128_x4"), 8, 1, kernels=("x",))


def test_an_ablation_figure_is_the_share_of_the_time_gone(fake_gpu, monkeypatch):
    monkeypatch.setattr(bench, "ablation", lambda version, remove, N, C, copy, repeats=20:
                        bench._timing("rest", N, C, [0.075] * 3, 1, copy))
    figure = investigate.ablation("v2_warp", "atomicAdd(...);", 8192, 1024)
    assert figure() == pytest.approx(70.0)
    with pytest.raises(ValueError, match="version must be one of"):
        investigate.ablation("v22", "x", 8, 8)


# --- what changed ---------------------------------------------------------------------------------

def test_what_changed_from_v4_to_v5_on_the_saved_run(no_gpu, capsys, monkeypatch):
    # outside IPython the table is printed and the figure not displayed (an earlier test of this
    # process may have started an InteractiveShell, which would display it as text here)
    monkeypatch.setattr("IPython.get_ipython", lambda: None)
    before = investigate.opening("v4_vec_bf16", 16384, 2048)
    after = investigate.opening("v5_two_pass", 16384, 2048)
    change = investigate.what_changed(before, after)
    printed = capsys.readouterr().out
    assert printed.strip() == str(change)
    assert str(change).splitlines() == [
        "what changed: v4_vec_bf16 -> v5_two_pass at 16384x2048 (saved on NVIDIA H100 80GB HBM3, "
        "2026-12-06)",
        "                               v4_vec_bf16          v5_two_pass          change",
        "bench time                     0.1234 ms            0.1454 ms            1.18x longer",
        "ncu duration                   110.3 us             125.9 us             +15.6 us",
        "DRAM throughput                77.0 %               66.4 %               -10.6 points",
        "DRAM bytes / element           8.48 B               8.34 B               1.02x fewer",
        "achieved occupancy             48.3 %               48.1 %               -0.2 points",
        "global load efficiency         99.9 %               99.9 %               +0.0 points",
        "L2 atomic sectors / element    0.006                0.000                -0.006",
        "bank conflicts / wavefront     0.10                 0.08                 -0.02",
        "top stalls                     long_scoreboard 76 % long_scoreboard 48 %",
        "                               short_scoreboard 9 % barrier 35 %",
        "                               wait 7 %             not_selected 6 %",
        # lesson 07's figure (v4's channels, v5's none): what v5 was built to change
        "channels differing (fp32 sums) 2048                 0                    -2048"]
    assert change.figure is not None
    change._ipython_display_()  # what_changed showed it: the cell's value adds nothing
    assert capsys.readouterr().out == ""
    change._ipython_display_()
    assert capsys.readouterr().out.strip() == str(change)


def test_what_changed_needs_two_openings_of_one_shape(no_gpu):
    a = investigate.opening("v1_naive", 8192, 1024)
    b = investigate.opening("v4_vec_bf16", 16384, 2048)
    with pytest.raises(ValueError, match="v1_naive at 8192x1024, after is v4_vec_bf16 at "
                                         "16384x2048"):
        investigate.what_changed(a, b)
    with pytest.raises(TypeError, match="after must be an Opening"):
        investigate.what_changed(a, "v2")


def test_what_changed_from_two_sources_names_both(no_gpu, fake_gpu, monkeypatch):
    after = investigate.opening("v2_warp", 8192, 1024)
    monkeypatch.setattr(investigate, "why_not_measured", lambda: NO_GPU)
    monkeypatch.setattr(saved, "RESULTS", REAL_RESULTS)
    before = investigate.opening("v1_naive", 8192, 1024)
    change = investigate.what_changed(before, after, show=False)
    assert change.header().endswith("(before: saved on NVIDIA H100 80GB HBM3, 2026-12-06; "
                                    "after: measured now on Made-up GPU)")
    # the saved v1_naive's 3.5362 ms against the made-up GPU's 0.25 ms
    assert dict((r[0], r[3]) for r in change.rows())["bench time"] == "14.14x shorter"
