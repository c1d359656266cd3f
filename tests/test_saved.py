"""course/saved.py: the saved openings (results/<RUN>/openings.json), how they are written on a GPU
run, and the seed written from the H100 run of 2026-12-05 (tools/save_openings.py)."""
from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import sys
from pathlib import Path

import pytest

from rmsnorm_lessons.core import ladder
from rmsnorm_lessons.core.ladder.v7_fast import Config
from rmsnorm_lessons.course import saved
from rmsnorm_lessons.inspection.nsight import Probe
from rmsnorm_lessons.inspection.nsight_profile import EXTRA, Profile

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("save_openings", ROOT / "tools" / "save_openings.py")
tool = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("save_openings", tool)  # its dataclasses look their module up by name
_spec.loader.exec_module(tool)
#: the run's executed notebooks, where this machine has them (the seed is re-made from them)
RUN_NOTEBOOKS = Path(os.environ.get("RMSNORM_SEED_NOTEBOOKS", "/tmp/h100run/notebooks"))


@pytest.fixture
def tmp_results(tmp_path, monkeypatch):
    monkeypatch.setattr(saved, "RESULTS", tmp_path)
    monkeypatch.delenv(saved.ENV, raising=False)
    return tmp_path


def test_keys_name_the_call():
    assert saved.key("v2_warp", 8192, 1024) == "v2_warp 8192x1024"
    assert saved.key(ladder.get("v3_smem"), 8, 16) == "v3_smem 8x16"
    assert saved.key("v7_fast", 16384, 4096, Config(staged=False)) == (
        "v7_fast 16384x4096 Config(K=None, prefetch=None, per_sm=None, staged=False)")
    assert saved.key(Probe("lesson09", "scale_f128_x4", 2), 64, 1) == (
        "lesson09:scale_f128_x4(2) 64x1")
    with pytest.raises(TypeError, match="target"):
        saved.key(3, 1, 1)
    with pytest.raises(ValueError, match="run must be a folder name"):
        saved.path("../elsewhere")


def test_a_second_measurement_of_a_call_keeps_the_first_ones_figures(tmp_results, monkeypatch):
    """Lesson 13's ladder measures v5 at 16384 x 2048 after lesson 08 did, without lesson 08's
    second kernel or lesson 07's channels: the entry keeps them (the H100 run of 2026-12-06 lost
    them when an entry was replaced whole)."""
    monkeypatch.setenv(saved.ENV, "h100-2026-12-21")
    first = {"timing": {"ms": 1.0}, "profile": {"dram_pct": 66.2},
             "extra": {"reduce_dweight_v5": {"duration_us": 18.6}},
             "figures": {"differing_channels": 0.0}}
    later = {"timing": {"ms": 1.1}, "profile": {"dram_pct": 66.4}, "extra": {},
             "figures": {"ablation:x": 5.0}}
    saved.record("opening", "v5_two_pass 8x8", first, device="GPU A", date="2026-12-21")
    saved.record("opening", "v5_two_pass 8x8", later, device="GPU A", date="2026-12-21")
    got, _ = saved.load("opening", "v5_two_pass 8x8", run="h100-2026-12-21")
    assert got["timing"] == {"ms": 1.1} and got["profile"] == {"dram_pct": 66.4}
    assert got["extra"] == {"reduce_dweight_v5": {"duration_us": 18.6}}
    assert got["figures"] == {"differing_channels": 0.0, "ablation:x": 5.0}
    # a figure measured again is the new one
    saved.record("opening", "v5_two_pass 8x8", dict(later, figures={"differing_channels": 3.0}),
                 device="GPU A", date="2026-12-21")
    got, _ = saved.load("opening", "v5_two_pass 8x8", run="h100-2026-12-21")
    assert got["figures"]["differing_channels"] == 3.0 and got["figures"]["ablation:x"] == 5.0


def test_record_writes_only_where_the_gpu_run_asks(tmp_results, monkeypatch):
    data = {"timing": None, "profile": None, "extra": {}, "figures": {"x": 1.0}}
    assert saved.record("opening", "v1_naive 8x8", data, device="GPU A") is None
    assert not any(tmp_results.iterdir())
    monkeypatch.setenv(saved.ENV, "1")
    written = saved.record("opening", "v1_naive 8x8", data, device="GPU A", date="2026-12-20")
    assert written == tmp_results / saved.RUN / saved.FILE
    monkeypatch.setenv(saved.ENV, "h200-2026-12-21")
    saved.record("opening", "v2_warp 8x8", data, device="GPU B", date="2026-12-21")
    got, label = saved.load("opening", "v2_warp 8x8", run="h200-2026-12-21")
    assert label == "GPU B, 2026-12-21" and got["figures"] == {"x": 1.0}
    assert got["from"] == "measured by rmsnorm_lessons.course.investigate"
    # a second entry joins the first; the first is kept
    monkeypatch.setenv(saved.ENV, "yes")
    saved.record("opening", "v3_smem 8x8", data, device="GPU A", date="2026-12-20")
    whole = saved.read()
    assert sorted(whole["opening"]) == ["v1_naive 8x8", "v3_smem 8x8"]
    assert whole["format"] == saved.FORMAT and whole["run"] == saved.RUN
    assert saved.load("opening", "v9 1x1") is None
    with pytest.raises(ValueError, match="kind must be one of"):
        saved.load("openings", "v1_naive 8x8")
    with pytest.raises(TypeError):  # a value JSON cannot hold is refused before the file changes
        saved.record("opening", "v4 1x1", {"profile": object()}, device="GPU A")
    assert "v4 1x1" not in saved.read()["opening"]


def test_a_file_of_another_format_is_refused(tmp_results):
    saved.path().parent.mkdir(parents=True)
    saved.path().write_text(json.dumps({"format": 99}))
    with pytest.raises(ValueError, match="format 99"):
        saved.load("opening", "v1_naive 8x8")


# --- the seed ---------------------------------------------------------------------------------

#: the run tools/save_openings.py `seed` wrote from the 2026-12-05 notebooks (saved.RUN has since
#: moved to the H100 run of 2026-12-06, whose openings were measured, not seeded)
SEED_RUN = "h100-2026-12-05"
SEEDED = saved.read(SEED_RUN)["opening"]


def test_the_seed_is_the_h100_runs_and_says_where_each_figure_came_from():
    assert SEEDED, f"{saved.path(SEED_RUN)} holds no openings"
    for name, entry in SEEDED.items():
        assert saved.label(entry) == "NVIDIA H100 80GB HBM3, 2026-12-05", name
        assert entry["from"].startswith("the 2026-12-05 run's notebooks: "), name
        parts = entry["from"].split(": ", 1)[1].split("; ")
        said = {p.rsplit(": ", 1)[0] for p in parts}
        held = {k for k, v in (("profile", entry["profile"]), ("time", entry["timing"])) if v}
        assert said == held | set(entry["figures"]), name
        assert all(" cell " in p for p in parts), name


@pytest.mark.parametrize("name", sorted(SEEDED))
def test_every_seeded_figure_is_whole(name):
    entry = SEEDED[name]
    t = entry["timing"]
    if t is not None:
        assert t["gbps"] == pytest.approx(t["bytes"] / (t["ms"] * 1e-3) / 1e9)
        assert 2900 < t["copy_gbps"] < 3100  # an H100's copy bandwidth, as that run measured it
        if not name.startswith("lesson09"):
            version = name.split()[0]
            if version == "v4_interleaved":
                ladder.v4_interleaved()
            assert t["bytes"] == ladder.get(version).bytes_moved(t["N"], t["C"])
    if entry["profile"] is not None:
        p = Profile.from_dict(entry["profile"])
        assert f"{p.shape[0]}x{p.shape[1]}" in name
        assert sum(s for _, _, s in p.top_stalls(9)) + (p.stall_share("unlisted") or 0) \
            == pytest.approx(100.0, abs=1.5)
        assert set(p.missing) == set(EXTRA) and all(getattr(p, f) is None for f in EXTRA)
    assert all(math.isfinite(v) for v in entry["figures"].values())


def test_the_saved_run_was_measured_on_one_card_and_day():
    """saved.RUN (the lessons' GPU run since 2026-12-06): every opening measured by investigate on
    one H100 or H200 the same day, its profile whole (nothing marked missing)."""
    whole = saved.read()
    assert whole["run"] == saved.RUN != SEED_RUN and whole["opening"]
    labels = {saved.label(e) for e in whole["opening"].values()}
    assert len(labels) == 1 and re.fullmatch(r"NVIDIA H(100|200)\b.*, \d{4}-\d\d-\d\d",
                                             labels.pop())
    for name, entry in whole["opening"].items():
        # two entries say, after this, which figures were read from the same run's printed
        # openings (RUNS.md: lesson 13's ladder had recorded over lessons 07 and 08's)
        assert entry["from"].startswith("measured by rmsnorm_lessons.course.investigate"), name
        assert entry["profile"] and not entry["profile"]["missing"], name
        assert name.startswith("lesson09") or entry["timing"], name


@pytest.mark.parametrize("run", sorted({SEED_RUN, saved.RUN}))
def test_no_saved_opening_holds_a_reading(run):
    text = saved.path(run).read_text()
    assert "bound:" not in text and "-bound" not in text


@pytest.mark.skipif(not RUN_NOTEBOOKS.is_dir(),
                    reason=f"the H100 run's notebooks are not at {RUN_NOTEBOOKS} (unpack the "
                           "run's archive there, or name the folder in RMSNORM_SEED_NOTEBOOKS)")
def test_the_seed_is_made_again_from_the_runs_notebooks(tmp_results):
    written = tool.seed(RUN_NOTEBOOKS, "seed-again")
    assert json.loads(written.read_text())["opening"] == SEEDED


def test_the_seed_reads_tables_as_the_run_printed_them():
    text = ("version        kernel                       N x C  time us  DRAM % occup. %  top "
            "stall reasons (share of stalls)\n"
            "v5_two_pass    rmsnorm_backward_v5     16384x2048    126.5    66.1     48.1  "
            "long_scoreboard 48 %, barrier 35 %, not_selected 6 %\nmemory-bound: DRAM at 66 %")
    p = tool.parse_profile(text, "v5_two_pass", 16384, 2048)
    assert (p.duration_us, p.dram_pct, p.occupancy_pct) == (126.5, 66.1, 48.1)
    assert p.stall_share("barrier") == pytest.approx(35.0) and p.stall_share("wait") is None
    with pytest.raises(ValueError, match="no profile row of v5_two_pass at 8192x1024"):
        tool.parse_profile(text, "v5_two_pass", 8192, 1024)
    bench = ("copy bandwidth 2969 GB/s\nversion                  N x C        ms     GB/s  % copy"
             "  speedup\nv4_vec_bf16         16384x2048    0.1248     2152   72.5%    1.00x\n")
    t = tool.parse_timing(bench, "v4_vec_bf16", 16384, 2048, 268_578_816)
    assert t["copy_gbps"] == 2969.0 and t["ms"] == 0.1248
    no_copy = bench.split("\n", 1)[1]  # without the printed copy: the fastest row's GB/s / %
    assert tool.parse_timing(no_copy, "v4_vec_bf16", 16384, 2048, 1)["copy_gbps"] == \
        pytest.approx(2152 / 0.725)
    assert tool.parse_figure("v2 without its atomics: 0.0764 ms against 0.2688 ms: ...",
                             "ablation") == pytest.approx(100 * (1 - 0.0764 / 0.2688))


def test_measure_calls_every_lessons_opening_with_the_run_set(monkeypatch):
    from types import ModuleType, SimpleNamespace

    seen = []

    def home(number, after=True, ladder=False, source="measured now on GPU A"):
        module = ModuleType(f"lesson{number}")
        if after:
            def opening(after=False):
                seen.append((number, after, os.environ.get(saved.ENV)))
                return SimpleNamespace(source=source)
        else:
            def opening():
                seen.append((number, False, os.environ.get(saved.ENV)))
                return SimpleNamespace(source=source)
        module.opening = opening
        if ladder:
            module.ladder_profile = lambda v: seen.append((number, v)) or SimpleNamespace(
                source=source)
        return module
    homes = {"02": home("02", after=False), "03": home("03"), "13": home("13", ladder=True)}
    monkeypatch.setattr(tool.importlib, "import_module",
                        lambda name: homes[name.removeprefix("rmsnorm_lessons.lessons.lesson")])
    monkeypatch.delenv(saved.ENV, raising=False)
    tool.measure("h100-2026-12-20", ["02", "03", "13"])
    assert seen[:4] == [("02", False, "h100-2026-12-20"), ("03", False, "h100-2026-12-20"),
                        ("03", True, "h100-2026-12-20"), ("13", False, "h100-2026-12-20")]
    assert [v for _, v in seen[5:]] == [r.name for r in ladder.SHIPPED]  # lesson 13's ladder
    homes["03"] = home("03", source="saved on NVIDIA H100 80GB HBM3, 2026-12-05")
    with pytest.raises(SystemExit, match="lesson 03 opening\\(\\) was not measured here"):
        tool.measure("h100-2026-12-20", ["03"])
