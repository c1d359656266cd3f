"""Compiling every kernel with nvcc, a learner's source string, and the ptxas report parser (CPU;
nvcc is required, not optional).

`make test` installs nvcc (NVIDIA's wheels) where none is on PATH, so a missing nvcc is a failure
here, never a skip.
"""
import pytest

import rmsnorm_lessons as rl
from rmsnorm_lessons.core import build, ladder
from rmsnorm_lessons.inspection import occupancy

KERNEL_FILES = sorted(p.stem for p in build.kernel_dir().glob("*.cu"))
# Turing to Blackwell: every rung builds and is inspected on each (issue 31)
ARCHS = ["sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120"]
SHIPPED = [r.name for r in ladder.SHIPPED]
# compiling a source string kept the skip it had among lesson 00-03's tests
needs_nvcc = pytest.mark.skipif(build.find_nvcc() is None, reason="nvcc not found")


def test_nvcc_is_found():
    assert build.find_nvcc() is not None, (
        "nvcc was not found: `make test` installs NVIDIA's nvcc wheels into .venv; elsewhere put "
        "CUDA 13 on PATH")
    assert build.nvcc_version()


def test_the_ladder_has_a_kernel_file_per_version():
    assert KERNEL_FILES, f"no .cu files in {build.kernel_dir()}"
    for name in SHIPPED:
        assert name in KERNEL_FILES, f"{name} has no kernels/{name}.cu"
    assert set(SHIPPED) <= set(rl.ladder.VERSIONS)
    assert "rmsnorm_forward" in KERNEL_FILES


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", KERNEL_FILES)
def test_every_kernel_file_compiles(name, arch):
    compiled = build.compile_file(name, arch)
    assert compiled.kind == "cubin" and compiled.arch == arch and compiled.name == name
    assert compiled.binary, "empty cubin"
    assert compiled.resources, f"ptxas reported no entry function for {name}:\n{compiled.log}"
    for r in compiled.resources.values():
        assert r.arch == arch
        assert 0 < r.registers <= 255
    if name in SHIPPED:  # (compiled with the rung's defines: v6 and v7 #error without them)
        missing = set(rl.ladder.get(name).kernels) - set(compiled.resources)
        # v7's wide rows need clusters: not built below sm_90
        if int(arch.removeprefix("sm_")) < 90:
            missing -= set(ladder.v7_fast.WIDE_KERNELS)
        assert not missing, (f"{name}: the launch plan names kernels the file does not define: "
                             f"{missing}")


INSPECTED = [(name, arch) for name in SHIPPED for arch in ARCHS]


@pytest.mark.parametrize("name, arch", INSPECTED)
def test_every_rung_is_inspected(name, arch):
    # what `python -m rmsnorm_lessons inspect NAME --arch ARCH` prints (from the compile cache)
    text = occupancy.report(name, arch, C=4096)
    assert f"occupancy ({arch}, block " in text, text
    assert "no occupancy limits" not in text and "cannot" not in text
    kernels_here = set(ladder.get(name).kernels) - (
        set(ladder.v7_fast.WIDE_KERNELS) if int(arch.removeprefix("sm_")) < 90 else set())
    for kernel in kernels_here:
        assert f"{kernel} ({arch}): " in text


def test_the_staged_kernel_only_traps_below_sm_80():
    # cp.async needs sm_80: below, the kernel is a trap the plan never launches
    staged = "rmsnorm_backward_v7_staged"
    small = build.resources("v7_fast", "sm_75")[staged]
    assert small.shared_bytes == 0 and small.registers <= 16 and small.barriers == 0, small
    warp_dots = 2 * ladder.v7_fast.STAGED_BLOCK // 32 * 4  # the kernel's own static shared memory
    assert build.resources("v7_fast", "sm_80")[staged].shared_bytes == warp_dots


def test_ptx_output():
    compiled = build.compile_file("v2_warp", "sm_90", kind="ptx")
    text = compiled.binary.decode()
    assert ".entry rmsnorm_backward_v2" in text
    assert ".target sm_90" in text


SAMPLE_LOG = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'reduce_dweight_v5' for 'sm_80'
ptxas info    : Function properties for reduce_dweight_v5
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 24 registers, used 0 barriers, 376 bytes cmem[0]
ptxas info    : Compile time = 3.301 ms
ptxas info    : Compiling entry function 'rmsnorm_backward_v6' for 'sm_90'
ptxas info    : Function properties for rmsnorm_backward_v6
    8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 64 registers, used 1 barriers, 8 bytes cumulative stack size, 16 bytes smem
ptxas info    : Compile time = 45.407 ms
ptxas info    : Compiling entry function 'tiny' for 'sm_90'
ptxas info    : Function properties for tiny
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 6 registers
"""


def test_parse_ptxas_sample():
    found = build.parse_ptxas(SAMPLE_LOG)
    assert list(found) == ["reduce_dweight_v5", "rmsnorm_backward_v6", "tiny"]
    r = found["reduce_dweight_v5"]
    assert (r.arch, r.registers, r.barriers, r.constant_bytes,
            r.shared_bytes) == ("sm_80", 24, 0, 376, 0)
    assert not r.spills
    r = found["rmsnorm_backward_v6"]
    assert (r.arch, r.registers, r.barriers, r.shared_bytes,
            r.stack_bytes) == ("sm_90", 64, 1, 16, 8)
    assert (r.spill_stores, r.spill_loads) == (4, 12) and r.spills
    r = found["tiny"]
    assert (r.registers, r.barriers, r.shared_bytes, r.constant_bytes) == (6, 0, 0, 0)


def test_parse_ptxas_ignores_noise():
    assert build.parse_ptxas("") == {}
    assert build.parse_ptxas("ptxas info    : 0 bytes gmem\nsome warning\n") == {}


def test_real_report_matches_the_parser():
    compiled = build.compile_file("v5_two_pass", "sm_90")
    assert set(compiled.resources) == {"rmsnorm_backward_v5", "reduce_dweight_v5"}
    assert compiled.resources == build.parse_ptxas(compiled.log)
    assert build.resources("v5_two_pass", "sm_90") == compiled.resources


@pytest.mark.parametrize("arch",
                         ["sm90", "90", "compute_90", "sm_9", "SM_90", "sm_90; rm -rf /", ""])
def test_bad_arch_refused(arch):
    with pytest.raises(ValueError, match=r"arch must look like 'sm_90'"):
        build.compile_file("v1_naive", arch)


def test_unknown_arch_is_a_compile_error():
    with pytest.raises(build.CompileError, match=r"nvcc failed for v1_naive.cu \(sm_11\)"):
        build.compile_file("v1_naive", "sm_11")


def test_bad_kind_and_unknown_file_refused():
    with pytest.raises(ValueError, match=r"kind must be 'cubin' or 'ptx'"):
        build.compile_file("v1_naive", "sm_90", kind="sass")
    with pytest.raises(FileNotFoundError,
                       match=r"no kernel file .*v0_missing.cu; known: .*v1_naive"):
        build.compile_file("v0_missing")


def test_kernel_source_is_the_file():
    path = build.kernel_path("v1_naive")
    assert build.kernel_source("v1_naive") == path.read_text()
    assert build.kernel_path("common.cuh").name == "common.cuh"


def test_compile_errors_are_summed_up_in_one_place():
    exc = build.CompileError("nvcc failed for yours (sm_90):\n"
                             "yours(12): error: identifier \"weights\" is undefined\n"
                             "/k/v7_fast.cu(40): warning: unused\n"
                             "/k/v7_fast.cu(41): error: no instance of row_pass\n"
                             "nvcc fatal   : Unsupported gpu architecture 'sm_11'\n"
                             "2 errors detected in the compilation of \"yours.cu\".\n")
    assert exc.errors("yours") == ["line 12: identifier \"weights\" is undefined",
                                   "v7_fast.cu(41): no instance of row_pass",
                                   "nvcc fatal   : Unsupported gpu architecture 'sm_11'"]
    assert exc.errors()[0] == "yours(12): identifier \"weights\" is undefined"
    assert exc.summary(keep=2, stem="yours", sep=" | ") == (
        "line 12: identifier \"weights\" is undefined | v7_fast.cu(41): no instance of row_pass")
    assert exc.first() == ("nvcc failed for yours (sm_90): yours(12): identifier \"weights\" is "
                           "undefined")
    bare = build.CompileError("nvcc failed for x (sm_90):\nsomething odd")
    assert bare.errors() == [] and bare.summary().endswith("something "
                                                           "odd") and bare.first() == bare.headline


def test_included_files_follow_quoted_includes(tmp_path):
    (tmp_path / "a.cuh").write_text('#pragma once\n#include "b.cuh"\n')
    (tmp_path / "b.cuh").write_text("// b\n")
    main = tmp_path / "main.cu"
    main.write_text('#include "a.cuh"\n#include <cuda_bf16.h>\n#include "common.cuh"\n#include '
                    '"nowhere.h"\n')
    found = build.included_files(main.read_text(), main)
    names = sorted(name.rsplit("/", 1)[-1] for name in found)
    assert names == ["<missing> nowhere.h", "a.cuh", "b.cuh", "common.cuh"]
    assert found[str((tmp_path / "b.cuh").resolve())] == "// b\n"


def test_the_disk_cache_is_shared_and_keyed_by_every_included_file(tmp_path, monkeypatch):
    kernel_dir = tmp_path / "kernels"
    kernel_dir.mkdir()
    (kernel_dir / "common.cuh").write_text("#define SCALE 2.0f\n")
    (kernel_dir / "tiny.cu").write_text('#include "common.cuh"\n'
                                        'extern "C" __global__ void tiny(float *x) { x[0] *= '
                                        'SCALE; }\n')
    monkeypatch.setenv("RMSNORM_LESSONS_KERNELS", str(kernel_dir))
    monkeypatch.setenv("RMSNORM_CACHE_DIR", str(tmp_path / "cache"))
    assert build.cache_dir() == tmp_path / "cache"
    runs = []
    real = build._run_nvcc
    monkeypatch.setattr(build, "_run_nvcc", lambda *a: runs.append(a[1]) or real(*a))
    first = build.compile_file("tiny", "sm_90")
    build._compile_keyed.cache_clear()  # as a second process would start: nothing in memory
    second = build.compile_file("tiny", "sm_90")
    assert runs == ["tiny"] and second.binary == first.binary
    assert second.resources == first.resources
    assert sorted(p.suffix for p in (tmp_path / "cache" / "nvcc").iterdir()) == [".cubin", ".log"]
    build.compile_file("tiny", "sm_80")  # another arch: another entry
    # a header changed: compiled again
    (kernel_dir / "common.cuh").write_text("#define SCALE 3.0f\n")
    third = build.compile_file("tiny", "sm_90")
    assert runs == ["tiny"] * 3 and third.binary != first.binary


def test_a_second_process_reads_the_cache(tmp_path):
    import subprocess
    import sys
    import time
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    env = {**__import__("os").environ, "RMSNORM_CACHE_DIR": str(tmp_path), "PYTHONPATH": str(root)}
    code = ("import time; from rmsnorm_lessons import build; t = time.perf_counter(); "
            "build.compile_file('v5_two_pass', 'sm_80'); print(time.perf_counter() - t)")
    times = []
    for _ in range(2):
        start = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                             timeout=300, check=True)
        times.append((float(out.stdout), time.perf_counter() - start))
    assert len(list((tmp_path / "nvcc").glob("*.cubin"))) == 1
    assert times[1][0] < times[0][0] / 5, times  # nvcc ran in the first process only


# --- compiling a source string (a learner's kernel) -----------------------------------------------


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
