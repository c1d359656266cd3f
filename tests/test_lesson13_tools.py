"""Lesson 13's tools as the lesson reads them, without a GPU but for two tests: compute-sanitizer's
report reader and its child's command line, ncu's CSV parser on text in the format Nsight Compute
documents, and the lines of kernels/common.cuh the lesson names from racecheck's report. The bugs
themselves are tested in tests/test_lesson13.py."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from rmsnorm_lessons.core import build, ladder
from rmsnorm_lessons.inspection import nsight as profile
from rmsnorm_lessons.inspection import sanitizer


# --- the sanitizer's report -----------------------------------------------------------------------

MEMCHECK = """\
child: bug_tail_v2 N=129 C=776: one call done
========= COMPUTE-SANITIZER
========= Invalid __global__ read of size 4 bytes
=========     at rmsnorm_backward_v2+0x3f0 in bug_tail_v2.cu:27
=========     by thread (8,0,0) in block (32,0,0)
=========     Address 0x7f3a4e000c20 is out of bounds
=========     and is 1 bytes after the nearest allocation at 0x7f3a4e000000 of size 3104 bytes
=========     Saved host backtrace up to driver entry point at kernel launch time
=========         Host Frame: [0x2ee4a0] in libcuda.so.1
=========
========= Invalid __global__ read of size 4 bytes
=========     at rmsnorm_backward_v2+0x3f0 in bug_tail_v2.cu:27
=========     by thread (40,0,0) in block (32,0,0)
=========     Address 0x7f3a4e000c20 is out of bounds
=========     Saved host backtrace up to driver entry point at kernel launch time
=========         Host Frame: [0x2ee4a0] in libcuda.so.1
=========
========= Program hit cudaErrorLaunchFailure (error 719) due to "unspecified launch failure" on \
CUDA API call
=========     Saved host backtrace up to driver entry point at error
=========
========= ERROR SUMMARY: 3 errors
"""

RACECHECK = """\
========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at rmsnorm_backward_v5+0x5c0 in \
bug_race_v5.cu:67
=========     and Read access at rmsnorm_backward_v5+0x6a0 in bug_race_v5.cu:70 [2048 hazards]
=========
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
"""


def test_entries_keep_the_findings_and_drop_the_backtraces():
    found = sanitizer.entries(MEMCHECK)
    assert [e[0] for e in found] == ["Invalid __global__ read of size 4 bytes"] * 2
    assert found[0][1] == "at rmsnorm_backward_v2+0x3f0 in bug_tail_v2.cu:27"
    assert not any("Host Frame" in ln or "backtrace" in ln for e in found for ln in e)
    report = sanitizer.Report("memcheck", "bug_tail_v2 at N=129, C=776", 86, MEMCHECK)
    assert report.errors == 3
    # the summary says 3, the report lists 2: the sentence says both
    assert report.sentence() == ("memcheck reports 3 error(s) in its summary, 2 finding(s) in its "
                                 "report, on bug_tail_v2 at N=129, C=776: "
                                 "Invalid __global__ read of size 4 bytes (x2)")
    assert "bug_tail_v2.cu:27" in report.key_lines() and "out of bounds" in str(report)


def test_racecheck_report():
    report = sanitizer.Report("racecheck", "bug_race_v5", 86, RACECHECK)
    assert report.summary == (1, 0)
    assert report.entries == [["Error: Race reported between Write access at "
                               "rmsnorm_backward_v5+0x5c0 in bug_race_v5.cu:67",
                               "and Read access at rmsnorm_backward_v5+0x6a0 in "
                               "bug_race_v5.cu:70 [2048 hazards]"]]
    clean = sanitizer.Report("racecheck", "v3_smem", 0,
                             "========= RACECHECK SUMMARY: 0 hazards displayed "
                             "(0 errors, 0 warnings)\n")
    assert clean.sentence() == "racecheck found no error on v3_smem"
    assert "did not finish" in sanitizer.Report("memcheck", "x", 1, "Traceback ...").sentence()
    assert "did not finish in time" in sanitizer.Report("memcheck", "x", None, "").sentence()


def test_child_command_and_spec():
    rung = ladder.get("v3_smem")
    spec = sanitizer.child_spec(rung, (129, 777), "/tmp/x.cu")
    names = (spec["plan_module"], spec["plan_fn"], spec["shared_module"])
    assert names == ("v3_smem", "plan", "v3_smem")
    assert json.loads(json.dumps(spec)) == spec
    cmd = sanitizer.command("compute-sanitizer", "synccheck", ["python", "-c", "pass"])
    assert cmd[:3] == ["compute-sanitizer", "--tool", "synccheck"]
    assert cmd[-3:] == ["python", "-c", "pass"]
    assert str(sanitizer.ERROR_EXIT) in cmd
    with pytest.raises(ValueError):
        sanitizer.command("compute-sanitizer", "leakcheck", [])
    bf16 = sanitizer.child_spec(ladder.get("v6_last_block"), (8200, 770), "/tmp/y.cu")
    assert bf16["C"] == 768  # rounded down to the rung's multiple


# --- ncu's CSV ------------------------------------------------------------------------------------

# the raw page (--csv --page raw): a header of identifying columns and metric names, a row of units,
# a row per profiled kernel; values may carry thousands separators
RAW = '''==PROF== Connected to process 4242 (/usr/bin/python3.12)
==PROF== Profiling "rmsnorm_backward_v3": 0%....50%....100% - 9 passes
==PROF== Disconnected from process 4242
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size",\
"Grid Size","Device","CC","dram__throughput.avg.pct_of_peak_sustained_elapsed",\
"gpu__time_duration.sum","sm__warps_active.avg.pct_of_peak_sustained_active",\
"smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio",\
"smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",\
"smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio",\
"smsp__average_warps_issue_stalled_selected_per_issue_active.ratio",\
"smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio"
"","","","","","","","","","","","%","usecond","%","ratio","ratio","ratio","ratio","ratio"
"0","4242","python3.12","127.0.0.1","rmsnorm_backward_v3","1","7","(256, 1, 1)","(528, 1, 1)","0",\
"9.0","31.52","1,234.56","46.20","0.80","9.40","0.30","1.00","6.50"
'''

DETAILS = '''\
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size",\
"Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","4242","python3.12","127.0.0.1","rmsnorm_backward_v7","1","7","(512, 1, 1)","(132, 1, 1)","0",\
"9.0","Command line profiler metrics","dram__throughput.avg.pct_of_peak_sustained_elapsed","%",\
"77.95"
"0","4242","python3.12","127.0.0.1","rmsnorm_backward_v7","1","7","(512, 1, 1)","(132, 1, 1)","0",\
"9.0","Command line profiler metrics","gpu__time_duration.sum","msecond","0.14"
"0","4242","python3.12","127.0.0.1","rmsnorm_backward_v7","1","7","(512, 1, 1)","(132, 1, 1)","0",\
"9.0","Command line profiler metrics","sm__warps_active.avg.pct_of_peak_sustained_active","%",\
"24.91"
"0","4242","python3.12","127.0.0.1","rmsnorm_backward_v7","1","7","(512, 1, 1)","(132, 1, 1)","0",\
"9.0","Command line profiler metrics",\
"smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio","ratio","4.26"
'''


def test_parse_the_raw_page():
    [k] = profile.parse_csv(RAW)
    assert k["kernel"] == "rmsnorm_backward_v3"
    assert k["units"][profile.DRAM] == "%"
    p = profile.to_profile(k, "v3_smem", (8192, 1024))
    assert (p.dram_pct, p.occupancy_pct) == (31.52, 46.20)
    assert p.duration_us == pytest.approx(1234.56)
    top = p.top_stalls()
    # "selected" is no stall
    assert [r for r, _, _ in top] == ["long_scoreboard", "short_scoreboard", "barrier"]
    assert sum(share for _, _, share in p.top_stalls(10)) == pytest.approx(100.0)
    text = profile.table([p])
    assert "v3_smem" in text and "31.5" in text and "long_scoreboard 55 %" in text


def test_parse_the_details_page():
    [k] = profile.parse_csv(DETAILS)
    p = profile.to_profile(k, "v7_fast", (8192, 1024))
    assert (p.dram_pct, p.occupancy_pct) == (77.95, 24.91)
    assert p.duration_us == pytest.approx(140.0)
    assert p.top_stalls() == [("long_scoreboard", 4.26, 100.0)]


def test_no_csv_is_no_kernel_and_failures_are_named():
    assert profile.parse_csv("==PROF== Connected\nnothing\n") == []
    denied = "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission"
    assert "ERR_NVGPUCTRPERM" in profile.explain_failure(denied, 1)
    missing = profile.explain_failure("==ERROR== Failed to find metric foo", 1)
    assert missing.startswith("ncu failed: ==ERROR==")
    none = profile.explain_failure("==WARNING== No kernels were profiled.", 0)
    assert "profiled no kernel" in none


def test_ncu_command_profiles_the_second_launch_of_one_kernel():
    cmd = profile.command("ncu", "v7_fast", 8192, 1024)
    assert cmd[:3] == ["ncu", "--clock-control", "none"]
    # the main kernel the plan launches at this shape: rows of C = 1024 are staged, C = 768 keeps
    # registers
    assert cmd[cmd.index("--kernel-name") + 1] == "rmsnorm_backward_v7_staged"
    short = profile.command("ncu", "v7_fast", 8192, 768)
    assert short[short.index("--kernel-name") + 1] == "rmsnorm_backward_v7"
    assert cmd[cmd.index("--launch-skip") + 1] == "1"
    assert cmd[cmd.index("--launch-count") + 1] == "1"
    assert cmd[cmd.index("--page") + 1] == "raw" and "--csv" in cmd
    metrics = cmd[cmd.index("--metrics") + 1].split(",")
    assert profile.DRAM in metrics and profile.OCCUPANCY in metrics and profile.STALLS in metrics
    assert cmd[-6:] == ["-m", "rmsnorm_lessons.inspection.nsight", "--launch", "v7_fast", "8192",
                        "1024"]
    with pytest.raises(ValueError, match="no kernel"):
        profile.command("ncu", "v3_smem", 8, 8, kernel="k")


def test_without_ncu_the_error_says_so(monkeypatch):
    monkeypatch.setattr(build, "find_tool", lambda tool: None)
    # no standalone install
    monkeypatch.setattr(profile, "Path", lambda *a: Path("/nonexistent/nsight-compute"))
    with pytest.raises(profile.ProfileError, match="ncu \\(Nsight Compute\\) was not found"):
        profile.profile("v3_smem", 8192, 1024)


def test_the_child_refuses_without_a_gpu():
    import subprocess
    import sys

    from rmsnorm_lessons.core import gpu
    if gpu.available():
        pytest.skip("a GPU is here")
    p = subprocess.run([sys.executable, "-m", "rmsnorm_lessons.inspection.nsight", "v3_smem", "64",
                        "256",
                        "--launch"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode != 0 and "GPU" in p.stderr


@pytest.mark.gpu
@pytest.mark.skipif(profile.find() is None, reason="ncu not installed")
def test_profile_on_the_gpu():
    p = profile.profile("v7_fast", 8192, 1024)
    assert p.dram_pct is not None and 0 < p.dram_pct <= 100
    assert p.occupancy_pct is not None and 0 < p.occupancy_pct <= 100
    assert p.top_stalls()


def test_the_line_numbers_lesson_13_reads_from_racecheck_are_common_cuh_s():
    """The prose names the lines of kernels/common.cuh the racecheck report points at: the
    accesses in store128 and load128, which move if the header changes."""
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    lines = (root / "kernels" / "common.cuh").read_text().splitlines()
    store = 1 + next(i for i, ln in enumerate(lines)
                     if "reinterpret_cast<Packed128<T>*>(target) = value" in ln)
    load = 1 + next(i for i, ln in enumerate(lines)
                    if "return *reinterpret_cast<const Packed128<T>*>(address)" in ln)
    nb = json.loads((root / "notebooks" / "13_finding_bugs.ipynb").read_text())
    prose = "".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    assert f"`store128` at line {store}," in prose and f"`load128` at line {load}," in prose
