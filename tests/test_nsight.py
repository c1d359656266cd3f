"""rl.profiles.bottleneck and the reading rule, without a GPU: synthetic profiles, a fake ncu child,
and the saved output of the same call in a notebook."""
from __future__ import annotations

import json

import pytest

from rmsnorm_lessons.core import child, gpu
from rmsnorm_lessons.course import profiles
from rmsnorm_lessons.inspection import nsight


def _profile(dram, occupancy=47.0, stalls=None, version="v3_smem"):
    return nsight.Profile(version, "rmsnorm_backward_v3", (8192, 1024), dram, occupancy, 80.0,
                          stalls if stalls is not None else {"long_scoreboard": 8.4,
                                                             "barrier": 0.7, "selected": 1.0,
                                                             "wait": 0.9})


# --- the rule -------------------------------------------------------------------------------------

def test_the_rule_states_its_thresholds():
    assert (nsight.MEMORY_BOUND_PCT, nsight.MOSTLY_PCT) == (60.0, 50.0)
    text = nsight.rule()
    assert "at or above 60 % of its peak" in text and "below 60 %" in text
    assert "at least 50 % of the stalls" in text
    assert max(len(line) for line in text.splitlines()) <= 100


@pytest.mark.parametrize("dram, stalls, want", [
    (91.0, None, "memory-bound: DRAM at 91 % of its peak"),
    (60.0, None, "memory-bound: DRAM at 60 % of its peak"),  # the line itself is memory-bound
    # long_scoreboard holds 8.4 of 10 stall units ("selected" is issuing, no stall): mostly
    (38.0, None, "latency-bound: DRAM at 38 % of its peak, warps mostly waiting on "
                 "long_scoreboard (global loads, 84 % of stalls) at 47 % achieved occupancy"),
    # no reason holds half the stalls: the top two
    (55.1, {"long_scoreboard": 3.4, "barrier": 1.6, "short_scoreboard": 1.2, "wait": 3.8},
     "latency-bound: DRAM at 55 % of its peak, warps waiting on wait (fixed latencies, 38 % of "
     "stalls) and long_scoreboard (global loads, 34 %) at 47 % achieved occupancy"),
    (59.7, {}, "latency-bound: DRAM at 59.7 % of its peak, stall reasons not reported at 47 % "
               "achieved occupancy"),
    (20.0, {"mystery": 1.0}, "latency-bound: DRAM at 20 % of its peak, warps mostly waiting on "
                             "mystery (100 % of stalls) at 47 % achieved occupancy"),
    (None, None, "no reading: ncu reported no DRAM throughput for this launch"),
])
def test_reading_of_synthetic_profiles(dram, stalls, want):
    assert nsight.reading(_profile(dram, stalls=stalls)) == want


def test_a_value_just_under_the_line_does_not_print_as_the_line():
    assert nsight.reading(_profile(59.96)).startswith("latency-bound: DRAM at 59.96 % of its")
    assert nsight.reading(_profile(34.0, occupancy=None)).endswith("(global loads, 84 % of "
                                                                   "stalls)")


def test_a_bottleneck_shows_the_table_line_and_one_reading():
    p = _profile(34.9)
    b = profiles.Bottleneck("v3_smem", (8192, 1024), p)
    lines = str(b).splitlines()
    assert lines[:2] == nsight.table([p]).splitlines() and len(lines) == 3
    assert lines[2] == nsight.reading(p) == b.reading
    assert repr(b) == str(b)

    class Printer:
        def text(self, t):
            self.got = t

    printer = Printer()
    b._repr_pretty_(printer, False)
    assert printer.got == str(b)


# --- bottleneck(): checked before anything runs ---------------------------------------------------

@pytest.fixture
def no_launch(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("a child was started")
    monkeypatch.setattr(child, "run", refuse)
    monkeypatch.setattr(nsight, "find", lambda: "ncu")


@pytest.mark.parametrize("args, error, match", [
    (("v9_nothing", 8192, 1024), ValueError, "version must be one of v1_naive"),
    (("v3_smem", 0, 1024), ValueError, r"N \(rows\) must be at least 1"),
    (("v3_smem", 8192, -4), ValueError, r"C \(columns\) must be at least 1"),
    (("v3_smem", 8192.0, 1024), TypeError, r"N \(rows\) must be an int, got float"),
    (("v3_smem", True, 1024), TypeError, r"N \(rows\) must be an int, got bool"),
    (("v3_smem", 8192, "1024"), TypeError, r"C \(columns\) must be an int, got str"),
    (("v4_vec_bf16", 8192, 1001), ValueError, "needs C to be a multiple of 8"),
    (("v3_smem", 1 << 31, 1024), ValueError, r"N \(rows\) must be below 2\*\*31"),
    (("v3_smem", 8192, 1 << 20), ValueError, "bytes of dynamic shared memory per block"),
    (("v3_smem", 8192, 1024, "rmsnorm_backward_v7"), ValueError,
     "kernel must be one of v3_smem's kernels"),
])
def test_arguments_are_checked_before_any_launch(no_launch, args, error, match):
    with pytest.raises(error, match=match):
        profiles.bottleneck(*args)


# --- bottleneck(): where ncu cannot run, one sentence and the saved output ------------------------

def test_without_ncu_it_says_so_and_does_not_raise(monkeypatch):
    monkeypatch.setattr(nsight, "find", lambda: None)
    monkeypatch.setattr(profiles, "saved_output", lambda *a: None)
    b = profiles.bottleneck("v3_smem", 8192, 1024)
    assert b.profile is None and b.reading is None
    assert str(b) == ("Not profiled here: ncu (Nsight Compute) was not found on PATH, under "
                      "CUDA_HOME or in /usr/local/cuda/bin; the saved output of this cell (the "
                      "H200's) shows what ncu measured there.")


def test_without_a_gpu_it_says_why_in_one_sentence(monkeypatch, no_launch):
    monkeypatch.setattr(gpu, "why_unavailable", lambda: "No NVIDIA driver here (libcuda.so.1 is "
                        "missing): kernels can be compiled. Launching them needs a GPU.")
    monkeypatch.setattr(profiles, "saved_output", lambda *a: ("v3 table\nlatency-bound: DRAM at 35 "
                                                            "% of its peak", "NVIDIA H200, "
                                                            "2026-12-04"))
    text = str(profiles.bottleneck("v3_smem", 8192, 1024))
    assert text.splitlines() == [
        "Not profiled here: No NVIDIA driver here (libcuda.so.1 is missing); the saved output of "
        "this call on NVIDIA H200, 2026-12-04 shows what ncu measured there:", "v3 table",
        "latency-bound: DRAM at 35 % of its peak"]


def _fake_ncu(monkeypatch, stdout, returncode=0):
    monkeypatch.setattr(nsight, "find", lambda: "ncu")
    monkeypatch.setattr(gpu, "why_unavailable", lambda: None)
    monkeypatch.setattr(profiles, "saved_output", lambda *a: None)
    seen = []

    def run(cmd, timeout=600, env=None, cwd=None):
        seen.append(cmd)
        return child.Finished(returncode, stdout, "")
    monkeypatch.setattr(child, "run", run)
    return seen


def test_a_driver_that_refuses_the_counters_is_named(monkeypatch):
    _fake_ncu(monkeypatch, "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission", 1)
    b = profiles.bottleneck("v3_smem", 8192, 1024)
    assert b.profile is None and "(ERR_NVGPUCTRPERM)" in b.why_not
    assert str(b).startswith("Not profiled here: ncu may not read this GPU's performance "
                             "counters (ERR_NVGPUCTRPERM)")
    assert str(b).endswith("the saved output of this cell (the H200's) shows what ncu measured "
                           "there.")


RAW = ('"ID","Kernel Name","dram__throughput.avg.pct_of_peak_sustained_elapsed",'
       '"gpu__time_duration.sum","sm__warps_active.avg.pct_of_peak_sustained_active",'
       '"smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",'
       '"smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio"\n'
       '"","","%","usecond","%","ratio","ratio"\n'
       '"0","rmsnorm_backward_v3","34.90","80.70","47.20","8.40","1.60"\n')


def test_a_profile_is_read_by_the_rule(monkeypatch):
    seen = _fake_ncu(monkeypatch, RAW)
    b = profiles.bottleneck("v3_smem", 8192, 1024)
    assert seen and seen[0][0] == "ncu" and b.profile.dram_pct == 34.9
    assert str(b).splitlines()[-1] == ("latency-bound: DRAM at 35 % of its peak, warps mostly "
                                       "waiting on long_scoreboard (global loads, 84 % of "
                                       "stalls) at 47 % achieved occupancy")


def test_the_saved_output_of_the_same_call_is_found(tmp_path):
    def cell(source, text):
        return {"cell_type": "code", "metadata": {}, "source": source, "outputs": [
            {"output_type": "execute_result", "data": {"text/plain": text}, "metadata": {}}]}
    nb = {"metadata": {"rmsnorm_lessons": {"device": "NVIDIA H200", "date": "2026-12-04"}},
          "cells": [cell("%%gpu\nrl.profiles.bottleneck('v3_smem', 8192, 768)", "not this shape"),
                    cell("rl.profiles.bottleneck('v3_smem', 8192, 1024)", "not a gpu cell"),
                    cell("%%gpu\nt = 1\nrl.profiles.bottleneck(\"v3_smem\", 8192, 1024)",
                         ["table\n", "memory-bound: DRAM at 70 % of its peak"])]}
    path = tmp_path / "02_naive.ipynb"
    path.write_text(json.dumps(nb))
    assert profiles.saved_output("v3_smem", 8192, 1024, [path]) == (
        "table\nmemory-bound: DRAM at 70 % of its peak", "NVIDIA H200, 2026-12-04")
    assert profiles.saved_output("v3_smem", 819, 1024, [path]) is None
    nb["metadata"] = {}  # no GPU run recorded: its outputs are not the H200's
    path.write_text(json.dumps(nb))
    assert profiles.saved_output("v3_smem", 8192, 1024, [path, tmp_path / "missing.ipynb"]) is None


def test_a_bottleneck_without_its_reading_shows_the_table_only():
    p = _profile(34.9)
    b = profiles.Bottleneck("v3_smem", (8192, 1024), p, show_reading=False)
    assert str(b) == nsight.table([p]) and b.reading == nsight.reading(p)
    saved = profiles.Bottleneck("v3_smem", (8192, 1024), why_not="no GPU", show_reading=False,
                                saved=("table\nlatency-bound: DRAM at 35 %", "NVIDIA H200, x"))
    assert "bound" not in str(saved) and str(saved).endswith("table")
