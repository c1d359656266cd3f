"""rl.nsight's extra metrics, any launch (a learner's rung, a config, a lesson's probe) and the diff
of two profiles, without a GPU: a fake ncu answers the query and the profile calls (CSV made up
here, in ncu's raw-page layout)."""
from __future__ import annotations

import pickle

import pytest

from rmsnorm_lessons.core import build, child, ladder
from rmsnorm_lessons.core.ladder import v7_fast
from rmsnorm_lessons.inspection import nsight
from rmsnorm_lessons.inspection.nsight_profile import EXTRA, UNLISTED, Profile

BASE_COLUMNS = {nsight.DRAM: ("%", "34.90"), nsight.DURATION: ("usecond", "80.70"),
                nsight.OCCUPANCY: ("%", "47.20"),
                "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio":
                    ("ratio", "8.40"),
                "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio":
                    ("ratio", "1.60")}
#: made-up values of the extra metrics, in ncu's units
EXTRA_COLUMNS = {"dram__bytes_read.sum": ("Mbyte", "100.00"),
                 "dram__bytes_write.sum": ("Mbyte", "33.50"),
                 "smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.pct": ("%", "12.50"),
                 "lts__t_sectors_op_red.sum": ("sector", "262144"),
                 "lts__t_sectors_op_atom.sum": ("sector", "0"),
                 "lts__throughput.avg.pct_of_peak_sustained_elapsed": ("%", "20.00"),
                 "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum": ("", "700"),
                 "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum": ("", "800")}


def csv_for(asked, kernel="rmsnorm_backward_v3"):
    """ncu's raw page for the metrics of a command line (the ones it asked for)."""
    cols = {k: v for k, v in {**BASE_COLUMNS, **EXTRA_COLUMNS}.items()
            if k in asked or k.startswith("smsp__average_warps")}
    head = ",".join(f'"{c}"' for c in ["ID", "Kernel Name", *cols])
    units = ",".join(f'"{u}"' for u in ["", "", *(u for u, _ in cols.values())])
    row = ",".join(f'"{v}"' for v in ["0", kernel, *(v for _, v in cols.values())])
    return f"{head}\n{units}\n{row}\n"


def _asked(cmd) -> list[str]:
    return cmd[cmd.index("--metrics") + 1].split(",")


def listing(without=()):
    """What ``ncu --query-metrics`` prints: base names, a type, a unit, a description."""
    names = sorted({nsight.base_name(m) for m in EXTRA_COLUMNS} | {"sm__cycles_elapsed"})
    return ("Device NVIDIA H100 80GB HBM3 (GH100)\n" + "-" * 40 + "\n"
            "Metric Name          Metric Type   Metric Unit   Metric Description\n"
            + "".join(f"{n}   Counter   byte   # of things\n" for n in names if n not in without))


@pytest.fixture
def fake_ncu(monkeypatch):
    """A fake ncu: ``state["listing"]`` answers --query-metrics (None: the query fails),
    ``state["refuse"]`` a metric it refuses with an error; every command is kept in ``calls``."""
    state = {"listing": listing(), "refuse": None, "calls": [], "jobs": [], "kernel": None}
    monkeypatch.setattr(nsight, "find", lambda: "ncu")
    monkeypatch.setattr(nsight, "_KNOWN", {})
    monkeypatch.setattr(nsight, "_REJECTED", {})

    def run(cmd, timeout=600, env=None, cwd=None):
        state["calls"].append(cmd)
        if cmd[1:] == ["--query-metrics"]:
            if state["listing"] is None:
                return child.Finished(1, "", "==ERROR== no device")
            return child.Finished(0, state["listing"], "")
        if "--job" in cmd:
            with open(cmd[cmd.index("--job") + 1], "rb") as f:
                state["jobs"].append(pickle.load(f))
        asked = _asked(cmd)
        refused = state["refuse"]
        if refused and refused in asked:
            return child.Finished(1, "", f"==ERROR== Failed to find metric {refused}\n")
        kernel = cmd[cmd.index("--kernel-name") + 1]
        return child.Finished(0, "==PROF== Connected\n" + csv_for(asked, kernel), "")
    monkeypatch.setattr(child, "run", run)
    return state


def _profile_calls(state):
    return [c for c in state["calls"] if "--metrics" in c]


def test_the_extra_metrics_are_read_with_their_units(fake_ncu):
    p = nsight.profile("v3_smem", 8192, 1024)
    assert (p.dram_pct, p.occupancy_pct, p.duration_us) == (34.9, 47.2, 80.7)
    assert p.dram_read_bytes == 100e6 and p.dram_write_bytes == 33.5e6
    assert p.dram_bytes == 133.5e6 and p.per_element("dram_bytes") == pytest.approx(
        133.5e6 / (8192 * 1024))
    assert p.load_efficiency_pct == 12.5 and p.red_sectors == 262144 and p.l2_pct == 20.0
    assert p.conflicts_per_wavefront == pytest.approx(7.0)  # 700 extra over 100 conflict-free
    assert p.missing == {}
    [cmd] = _profile_calls(fake_ncu)
    assert set(_asked(cmd)) == set(nsight.METRICS)
    assert cmd[cmd.index("--kernel-name") + 1] == "rmsnorm_backward_v3"


def test_a_metric_this_ncu_does_not_list_is_not_asked_and_reads_not_measured(fake_ncu):
    fake_ncu["listing"] = listing(without=("lts__t_sectors_op_atom",
                                           "l1tex__data_bank_conflicts_pipe_lsu_mem_shared"))
    p = nsight.profile("v3_smem", 8192, 1024)
    asked = _asked(_profile_calls(fake_ncu)[0])
    assert "lts__t_sectors_op_atom.sum" not in asked and nsight.DRAM in asked
    assert "lts__t_sectors_op_red.sum" in asked
    assert p.atom_sectors is None and p.bank_conflicts is None and p.red_sectors == 262144
    assert p.why_missing("atom_sectors") == "not measured by this ncu"
    assert p.conflicts_per_wavefront is None and p.dram_pct == 34.9
    nsight.profile("v2_warp", 8192, 1024)  # the query is made once per process
    assert sum(c[1:] == ["--query-metrics"] for c in fake_ncu["calls"]) == 1


def test_a_refused_metric_costs_one_retry_not_the_profile(fake_ncu):
    fake_ncu["listing"] = None  # the query gives nothing: every metric is asked for
    fake_ncu["refuse"] = "lts__t_sectors_op_atom.sum"
    p = nsight.profile("v3_smem", 8192, 1024)
    first, second = _profile_calls(fake_ncu)
    assert "lts__t_sectors_op_atom.sum" in _asked(first)
    assert "lts__t_sectors_op_atom.sum" not in _asked(second)
    assert p.atom_sectors is None and p.dram_read_bytes == 100e6
    nsight.profile("v3_smem", 8192, 1024)  # refused once: not asked again in this process
    assert len(_profile_calls(fake_ncu)) == 3


def test_a_failure_that_is_not_about_a_metric_is_not_retried(fake_ncu, monkeypatch):
    def run(cmd, timeout=600, env=None, cwd=None):
        fake_ncu["calls"].append(cmd)
        return child.Finished(1, "", "==ERROR== ERR_NVGPUCTRPERM - no permission")
    monkeypatch.setattr(child, "run", run)
    with pytest.raises(nsight.ProfileError, match="ERR_NVGPUCTRPERM"):
        nsight.profile("v3_smem", 8192, 1024)
    assert len(_profile_calls(fake_ncu)) == 1


def test_rejected_names_the_metrics_an_error_is_about():
    asked = nsight.METRICS
    assert nsight.rejected("==ERROR== Failed to find metric l1tex__data_pipe_lsu_wavefronts_mem_"
                           "shared.sum", asked) == {
        "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum"}
    assert nsight.rejected("==ERROR== Invalid metric name", asked) == set(asked[len(nsight.BASE):])
    assert nsight.rejected("==ERROR== ERR_NVGPUCTRPERM", asked) == set()


def test_a_learners_rung_goes_to_the_child_as_a_job(fake_ncu):
    text = build.kernel_source("v3_smem")
    mine = ladder.rung_from_source(name="yours_v3_profiled", source="// mine\n" + text,
                                   like="v3_smem", register_it=False)
    p = nsight.profile(mine, 1024, 256)
    [job] = fake_ncu["jobs"]
    assert job["action"] == nsight.LAUNCH_JOB and job["kwargs"]["rung"] == mine
    assert job["kwargs"]["rung"].source.startswith("// mine")
    assert p.version == "yours_v3_profiled" and p.shape == (1024, 256)


def test_a_config_goes_as_a_job_and_names_the_path_its_plan_launches(fake_ncu):
    registers = v7_fast.Config(staged=False)
    nsight.profile("v7_fast", 16384, 4096, config=registers)
    [job] = fake_ncu["jobs"]
    assert job["kwargs"]["rung"] == "v7_fast" and job["kwargs"]["config"] == registers
    kernel = ladder.plan("v7_fast", 16384, 4096, config=registers)[0].kernel
    cmd = _profile_calls(fake_ncu)[0]
    assert cmd[cmd.index("--kernel-name") + 1] == kernel


def test_a_probe_is_launched_by_its_lesson(fake_ncu):
    probe = nsight.Probe("lesson09", "scale_f128_x4", 2)
    p = nsight.profile(probe, 64 * 2**20, 1)
    [job] = fake_ncu["jobs"]
    assert job["action"] == nsight.PROBE_JOB
    assert job["kwargs"] == dict(lesson="lesson09", kernel="scale_f128_x4", N=64 * 2**20, C=1,
                                 args=(2,))
    assert (p.version, p.kernel) == ("scale_f128_x4", "scale_f128_x4")


def test_the_probe_child_calls_the_lessons_launch(monkeypatch):
    seen = []

    class Module:
        @staticmethod
        def launch(kernel, N, C, *args, launches):
            seen.append((kernel, N, C, args, launches))
    monkeypatch.setattr(nsight.importlib, "import_module",
                        lambda name: Module if name == "rmsnorm_lessons.lessons.lesson09.probe"
                        else None)
    out = nsight.launch_probe("lesson09", "scale_f32_x1", 1024, 1, (4,))
    assert seen == [("scale_f32_x1", 1024, 1, (4,), 2)] and "2 launches" in out["line"]


@pytest.mark.parametrize("call, error, match", [
    (lambda: nsight.Probe("09", "scale"), ValueError, "lessonNN"),
    (lambda: nsight.Probe("lesson09", "scale f"), ValueError, "kernel"),
    (lambda: nsight.Probe("lesson09", "scale", [2]), TypeError, "numbers or strings"),
    (lambda: nsight.checked(nsight.Probe("lesson09", "scale_f32_x1"), 8, 8, "other"),
     ValueError, "the probe's"),
    (lambda: nsight.checked(nsight.Probe("lesson09", "scale_f32_x1"), 8, 8, config=1),
     ValueError, "no config"),
    (lambda: nsight.checked("v3_smem", 8192, 1024, config=v7_fast.Config(K=2)), ValueError,
     "config"),
    (lambda: nsight.checked("v3_smem", 8192, 1024, overwrite=True), ValueError, "overwrite"),
    (lambda: nsight.checked("v3_smem", 0, 1024), ValueError, r"N \(rows\)"),
])
def test_bad_targets_are_refused_before_any_launch(call, error, match, monkeypatch):
    monkeypatch.setattr(child, "run", lambda *a, **k: pytest.fail("a child was started"))
    with pytest.raises(error, match=match):
        call()


# --- Profile as data ------------------------------------------------------------------------------

def _made_up(version="v4_vec_bf16", dram=76.8, stalls=None, **extra):
    return Profile(version, "k", (16384, 2048), dram, 48.3, 111.1,
                   stalls if stalls is not None else {"long_scoreboard": 7.6,
                                                      "short_scoreboard": 0.9, "wait": 0.7,
                                                      "selected": 1.0, "barrier": 0.8},
                   **extra)


def test_a_profile_survives_json():
    import json

    p = _made_up(dram_read_bytes=4e8, missing={"red_sectors": "not in the saved run"})
    back = Profile.from_dict(json.loads(json.dumps(p.as_dict())))
    assert back == p and isinstance(back.shape, tuple)
    with pytest.raises(ValueError, match="unknown field"):
        Profile.from_dict({**p.as_dict(), "colour": 1})


def test_per_element_takes_the_sums_only():
    p = _made_up(dram_read_bytes=16384 * 2048 * 6.0, dram_write_bytes=16384 * 2048 * 2.0)
    assert p.per_element("dram_bytes") == 8.0 and p.per_element("red_sectors") is None
    with pytest.raises(ValueError, match="per_element takes one of"):
        p.per_element("dram_pct")


def test_a_saved_profiles_unlisted_stalls_keep_the_listed_shares():
    p = _made_up(stalls={"long_scoreboard": 76.0, "short_scoreboard": 9.0, "wait": 7.0,
                         UNLISTED: 8.0})
    assert [(r, round(s)) for r, _, s in p.top_stalls(5)] == [
        ("long_scoreboard", 76), ("short_scoreboard", 9), ("wait", 7)]
    assert p.stall_share("wait") == pytest.approx(7.0) and p.stall_share("barrier") is None
    assert p.stall_share_at_most("barrier") == pytest.approx(7.0)  # below the third listed
    full = _made_up()
    assert full.stall_share("mio_throttle") == 0.0  # every reason reported: an absent one is 0
    assert full.stall_share("long_scoreboard") == pytest.approx(76.0)  # "selected" is no stall


# --- the diff -------------------------------------------------------------------------------------

def test_a_diff_lists_what_moved():
    before = _made_up(dram_read_bytes=16384 * 2048 * 6.0, dram_write_bytes=16384 * 2048 * 2.0)
    after = _made_up("v5_two_pass", dram=66.1, stalls={"long_scoreboard": 4.8, "barrier": 3.5,
                                                       "not_selected": 0.6},
                     dram_read_bytes=16384 * 2048 * 7.0, dram_write_bytes=16384 * 2048 * 2.0)
    after.duration_us = 126.5
    d = nsight.diff(before, after)
    rows = {r[0]: r[1:] for r in d.rows()}
    assert rows["ncu duration"] == ("111.1 us", "126.5 us", "+15.4 us")
    assert rows["DRAM throughput"] == ("76.8 %", "66.1 %", "-10.7 points")
    assert rows["DRAM bytes / element"] == ("8.00 B", "9.00 B", "1.12x")
    assert rows["top stalls"][:2] == ("long_scoreboard 76 %", "long_scoreboard 54 %")
    assert "global load efficiency" not in rows  # measured in neither
    text = str(d)
    assert text.splitlines()[0].split() == ["v4_vec_bf16", "v5_two_pass", "change"]
    assert all(line == line.rstrip() for line in text.splitlines())


def test_a_diff_needs_one_shape():
    a, b = _made_up(), _made_up("v5_two_pass")
    b.shape = (8192, 1024)
    with pytest.raises(ValueError, match="v4_vec_bf16 at 16384x2048.*v5_two_pass at 8192x1024"):
        nsight.diff(a, b)
    with pytest.raises(TypeError, match="after must be a Profile"):
        nsight.diff(a, "v5")


def test_every_extra_field_has_a_metric_and_a_meaning():
    assert all(m.count("__") == 1 and meaning for m, meaning in EXTRA.values())
    assert nsight.METRICS[:4] == nsight.BASE


def test_lesson09s_probe_refuses_a_bad_call_before_the_gpu(monkeypatch):
    from rmsnorm_lessons.core import gpu
    from rmsnorm_lessons.lessons.lesson09 import probe

    monkeypatch.setattr(gpu, "require", lambda: pytest.fail("the GPU was asked for"))
    with pytest.raises(ValueError, match="variant must be one of"):
        probe.launch("scale_f64_x1", 1024, 1)
    with pytest.raises(ValueError, match="whole 16-byte loads of scale_f128_x4"):
        probe.launch("scale_f128_x4", 3, 1)
