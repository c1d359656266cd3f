"""The environment doctor every lesson's set-up cell prints (rmsnorm_lessons/course/doctor.py): one
line a thing, what a lesson does without each missing one, and never a traceback (CPU)."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from types import SimpleNamespace

import pytest

from rmsnorm_lessons.core import build, gpu
from rmsnorm_lessons.course import doctor, registry

ALL_TOOLS = {"nvcc": "13.0.88 (/usr/bin/nvcc)", "ncu": "2025.1.0.0 (/usr/bin/ncu)",
             "compute-sanitizer": "2025.1.0.0 (/usr/bin/compute-sanitizer)",
             "nvdisasm": "13.0.85 (/usr/bin/nvdisasm)"}
H100 = "NVIDIA H100 80GB HBM3, compute capability 9.0 (sm_90), driver 570.86.15 (CUDA 12.8)"


def _row(needs, stem="13_finding_bugs", title="Finding bugs and bottlenecks"):
    return SimpleNamespace(stem=stem, number=stem[:2], title=title, needs=tuple(needs),
                           path=None)


def _lines(text):
    return {line.split()[0]: line for line in text.splitlines()[1:] if line.startswith("  ")}


def test_everything_present_is_one_line_each_and_says_so():
    m = doctor.Machine(H100, None, dict(ALL_TOOLS))
    text = doctor.report(_row(doctor.NEEDS), m, saved={"device": "NVIDIA H200"})
    assert text.splitlines()[0] == "Lesson 13 (Finding bugs and bottlenecks) on this machine:"
    lines = _lines(text)
    assert set(lines) == {"GPU", *doctor.TOOLS}
    assert lines["GPU"].endswith(H100) and lines["ncu"].endswith(ALL_TOOLS["ncu"])
    assert text.splitlines()[-1] == "Everything in this lesson runs here."
    assert len(text.splitlines()) == 7


def test_a_missing_tool_says_what_this_lesson_cannot_do_in_one_line():
    tools = dict(ALL_TOOLS, ncu=None, nvdisasm=None)
    m = doctor.Machine(None, "No NVIDIA driver here (libcuda.so.1 is missing)", tools)
    text = doctor.report(_row(("gpu", "nvcc", "ncu")), m,
                         saved={"device": "NVIDIA H200", "date": "2026-12-04"})
    lines = _lines(text)
    assert len(text.splitlines()) == 6  # the heading and one line each: nothing more
    assert lines["GPU"].startswith("  GPU                none usable: No NVIDIA driver here")
    assert "output saved on NVIDIA H200 (2026-12-04) instead of running" in lines["GPU"]
    assert "profile saved on NVIDIA H200 (2026-12-04)" in lines["ncu"]
    assert lines["GPU"].endswith("your kernels run on the CPU twin (PASS on the CPU, or NOT YET; "
                                 "v7's as its register path alone)")
    m = doctor.Machine(None, "no GPU", tools, twin="the CPU twin needs g++ (apt install g++)")
    assert _lines(doctor.report(_row(("gpu",)), m))["GPU"].endswith(
        "not run (NOT VERIFIED: the CPU twin needs g++ (apt install g++))")
    # nvdisasm is missing too, but this lesson does not need it
    assert lines["nvdisasm"].endswith("missing: this lesson does not use it")
    assert "Everything" not in text and "Traceback" not in text


def test_every_need_has_its_sentence_and_bad_needs_are_refused():
    assert set(doctor.WITHOUT) == set(doctor.NEEDS)
    m = doctor.Machine(None, "no GPU", {t: None for t in doctor.TOOLS})
    text = doctor.report(_row(doctor.NEEDS), m)
    for need in doctor.NEEDS:  # no {placeholder} left, the saved run unnamed: "the course's GPU"
        assert doctor.WITHOUT[need].format(saved="the course's GPU",
                                           twin=doctor.TWIN[None]) in text
    assert "{" not in text
    with pytest.raises(ValueError, match=r"needs of 13_finding_bugs: \['gdb'\] are not among"):
        doctor.report(_row(("gpu", "gdb")), m)


def test_the_target_line_is_shown_where_rmsnorm_arch_is_set(monkeypatch):
    monkeypatch.setenv("RMSNORM_ARCH", "compute_75")
    assert doctor._target().startswith("compute_75 ($RMSNORM_ARCH)")
    monkeypatch.setenv("RMSNORM_ARCH", "garbage")
    bad = doctor._target()
    assert bad.startswith("not used: ") and "garbage" in bad
    monkeypatch.delenv("RMSNORM_ARCH")
    assert doctor._target() is None


def test_survey_reports_this_machine():
    m = doctor.survey()
    assert (m.gpu is None) == (gpu.why_unavailable() is not None)
    for tool in ("nvcc", "nvdisasm", "compute-sanitizer"):
        found = build.find_tool(tool)
        assert (m.tools[tool] is None) == (found is None), tool
        if found:
            assert m.tools[tool].endswith(f"({found})")
    if build.find_nvcc():
        assert m.tools["nvcc"].startswith(build.nvcc_version())


def test_survey_never_raises(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("the driver fell over\nsecond line")

    monkeypatch.setattr(gpu, "why_unavailable", broken)
    monkeypatch.setattr(build, "find_tool", broken)
    m = doctor.survey()
    assert m.gpu is None and m.gpu_reason == (
        "the GPU could not be queried (RuntimeError: the driver fell over)")
    assert m.tools["nvcc"] == "could not be looked for (RuntimeError: the driver fell over)"
    text = doctor.report(_row(doctor.NEEDS), m)
    assert "nothing compiles here" in _lines(text)["nvcc"]


def test_versions_and_the_driver_release_are_read(tmp_path):
    tool = tmp_path / "nvdisasm"
    tool.write_text("#!/bin/sh\necho 'nvdisasm: NVIDIA (R) CUDA disassembler'\n"
                    "echo 'Cuda compilation tools, release 13.0, V13.0.85'\n")
    tool.chmod(0o755)
    assert doctor.tool_version(str(tool)) == "13.0.85"
    assert doctor.tool_version(str(tmp_path / "missing")) is None
    proc = tmp_path / "version"
    proc.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.86.15  Thu Jan 1 2026\n"
                    "GCC version:  gcc version 12\n")
    assert doctor.driver_release(proc) == "570.86.15"
    open_kernel = tmp_path / "open"
    open_kernel.write_text("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  "
                           "580.65.06  Release Build\n")
    assert doctor.driver_release(open_kernel) == "580.65.06"
    assert doctor.driver_release(tmp_path / "none") is None


def test_the_saved_run_is_read_from_the_lessons_notebook(tmp_path):
    nb = tmp_path / "13_finding_bugs.ipynb"
    nb.write_text(json.dumps({"cells": [], "metadata": {"rmsnorm_lessons": {
        "device": "NVIDIA H100 80GB HBM3", "date": "2026-12-05"}}}))
    row = SimpleNamespace(**{**vars(_row(doctor.NEEDS)), "path": nb})
    assert doctor.saved_run(row) == {"device": "NVIDIA H100 80GB HBM3", "date": "2026-12-05"}
    m = doctor.Machine(None, "no GPU", dict(ALL_TOOLS))
    assert "saved on NVIDIA H100 80GB HBM3 (2026-12-05)" in doctor.report(row, m)
    nb.write_text("not json")
    assert doctor.saved_run(row) is None


def test_the_report_in_a_fresh_process_prints_no_traceback():
    code = "from rmsnorm_lessons.course import doctor; print(doctor.report(None))"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("The course on this machine:\n  GPU  ")
    assert "Traceback" not in p.stdout + p.stderr


NCU = re.compile(r"\b(?:profiles|nsight)\.(?:bottleneck|profile|find)\b")
SANITIZER = re.compile(r"\bsanitizer\.\w+\(")
SASS = re.compile(r"\bsass\.\w+\(|--sass\b")


@pytest.mark.parametrize("lesson", registry.LESSONS, ids=lambda lesson: lesson.stem)
def test_each_lessons_needs_are_what_its_notebook_uses(lesson):
    """The registry's needs cover every use found in the notebook: a %%gpu cell, a profile (ncu),
    a kernel exercise (checked with compute-sanitizer and in its SASS), a sanitizer or SASS
    call; every lesson compiles (nvcc)."""
    nb = json.loads(lesson.path.read_text())
    code = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    text = "\n".join(code)
    used = {"nvcc"}
    used |= {"gpu"} if any(c.startswith("%%gpu") for c in code) else set()
    used |= {"ncu"} if NCU.search(text) else set()
    if lesson.kernel_exercise or SANITIZER.search(text):
        used.add("compute-sanitizer")
    if lesson.kernel_exercise or SASS.search(text):
        used.add("nvdisasm")
    assert set(lesson.needs) <= set(doctor.NEEDS), lesson.needs
    assert used <= set(lesson.needs), f"{lesson.stem} uses {sorted(used - set(lesson.needs))}"
    doctor.report(lesson.stem, doctor.Machine(None, "no GPU", {}))  # every row reports


@pytest.mark.gpu
def test_on_a_gpu_the_doctor_names_it_its_capability_and_driver():
    f = gpu.facts()
    m = doctor.survey()
    major, minor = f.compute_capability
    assert m.gpu.startswith(f"{f.name}, compute capability {major}.{minor} ({f.arch}), driver ")
    d = f.driver_version
    assert m.gpu.endswith(f"(CUDA {d // 1000}.{d % 1000 // 10})") and m.gpu_reason is None
    release = doctor.driver_release()
    if release:  # the kernel module's release, where /proc says it
        assert f"driver {release} (CUDA" in m.gpu
    assert doctor.report("02_naive", m).splitlines()[1].startswith(f"  GPU                {f.name}")
