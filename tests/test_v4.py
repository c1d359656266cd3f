"""v4_vec_bf16's dweight staging: the planar slot (shipped) and the interleaved one
(``-DV4_INTERLEAVED=1``).

Here: the Python mirror of the kernel's ``staged()`` is checked against the CUDA itself (a host
program that includes kernels/v4_vec_bf16.cu, built by nvcc and run on the CPU), the planar layout
gives every channel its own slot and a warp's shared atomic no conflict, the interleaved rung is
v4's own text built with the define, and the bank picture says so. On a GPU: both layouts match the
float64 reference.
"""
from __future__ import annotations

import subprocess

import numpy as np
import pytest

from rmsnorm_lessons.core import build, compare, ladder
from rmsnorm_lessons.core.ladder import v4_vec_bf16 as v4
from rmsnorm_lessons.course import plots
from rmsnorm_lessons.inspection import sass
from rmsnorm_lessons.lessons import lesson06

needs_nvcc = pytest.mark.skipif(build.find_nvcc() is None, reason="nvcc not found")
needs_sass = pytest.mark.skipif(build.find_tool("nvdisasm") is None
                                and build.find_tool("cuobjdump") is None,
                                reason="no SASS tools (cuobjdump/nvdisasm)")
CS = (8, 16, 256, 776, 1024, 1600, 2056, 16384)

HOST_PROGRAM = """
#include "v4_vec_bf16.cu"
#include <cstdio>
#include <cstdlib>
int main(int argc, char** argv) {
    for (int a = 1; a < argc; a++) {
        int C = atoi(argv[a]);
        for (int c = 0; c < C; c++) printf("%d ", staged(c, C));
        printf("\\n");
    }
    return 0;
}
"""


@pytest.fixture
def interleaved():
    rung = ladder.v4_interleaved()
    yield rung
    ladder.unregister(rung.name)


@needs_nvcc
@pytest.mark.parametrize("define", [0, 1], ids=["planar", "interleaved"])
def test_python_staged_is_the_kernels(tmp_path, define):
    main = tmp_path / "staged_host.cu"
    main.write_text(HOST_PROGRAM)
    exe = tmp_path / "staged_host"
    subprocess.run([build.require_nvcc(), "-arch=sm_90", f"-DV4_INTERLEAVED={define}",
                    f"-I{build.kernel_dir()}",
                    str(main), "-o", str(exe)], check=True, capture_output=True, text=True,
                   timeout=300)
    out = subprocess.run([str(exe), *map(str, CS)], check=True, capture_output=True,
                         text=True).stdout
    for C, line in zip(CS, out.splitlines(), strict=True):
        got = np.array(line.split(), int)
        assert np.array_equal(got, v4.staged(np.arange(C), C, interleaved=bool(define))), C


@pytest.mark.parametrize("C", CS)
def test_planar_gives_each_channel_a_slot_and_no_conflict(C):
    slots = v4.staged(np.arange(C), C)
    assert sorted(slots.tolist()) == list(range(C))  # one-to-one onto the C floats of shared memory
    steps = -(-C // (v4.VEC * v4.WARP))
    for step in range(steps):
        for k in range(v4.VEC):
            assert v4.conflict_degree(C, k, step) == 1
            lanes = v4.lane_slots(C, k, step).size
            # interleaved: lane l at bank (8l + k) % 32, so 8 lanes share a bank once all 32 lanes
            # work
            assert v4.conflict_degree(C, k, step, interleaved=True) == -(-lanes // 4)


def test_lane_slots_follow_the_loop():
    assert v4.lane_slots(1024, 3, interleaved=True).tolist() == [8 * lane + 3 for lane in range(32)]
    assert v4.lane_slots(1024, 3).tolist() == [3 * 128 + lane for lane in range(32)]
    assert v4.lane_slots(1024, 0, step=1).tolist() == list(range(32, 64))
    # the last chunk (channels 768..775): one lane
    assert v4.lane_slots(776, 0, step=3).tolist() == [96]


def test_interleaved_rung_is_v4_with_the_define(interleaved):
    # twice is fine
    assert ladder.get(v4.INTERLEAVED) is interleaved and ladder.v4_interleaved() == interleaved
    assert interleaved.defines == {"V4_INTERLEAVED": 1} and v4.RUNG.defines == {}
    # built from the shipped file
    assert interleaved.source is None and interleaved.stem == "v4_vec_bf16"
    assert build.kernel_text(v4.INTERLEAVED) == ("v4_vec_bf16", build.kernel_source("v4_vec_bf16"),
                                                 {"V4_INTERLEAVED": 1})
    assert interleaved.kernels == v4.RUNG.kernels and interleaved.plan is v4.plan
    assert (interleaved.dtype, interleaved.c_multiple, interleaved.block_size,
            interleaved.deterministic) == \
        (v4.RUNG.dtype, v4.RUNG.c_multiple, v4.RUNG.block_size, v4.RUNG.deterministic)


@needs_nvcc
@needs_sass
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_both_layouts_compile_without_spills_and_add_with_cas_loops(interleaved, arch):
    counts = {}
    for name in (v4.RUNG.name, interleaved.name):
        res = build.resources(name, arch)["rmsnorm_backward_v4"]
        # 4 blocks of 256 threads a SM: 64 registers each
        assert not res.spills and res.registers <= 64, res
        listing = sass.listing(name, arch).functions["rmsnorm_backward_v4"].instructions
        atoms = [i.opcode for i in listing if i.opcode.startswith("ATOMS")]
        # a float atomicAdd on shared memory: a compare-and-swap loop, one per channel of the chunk
        assert atoms == ["ATOMS.CAST.SPIN"] * v4.VEC, atoms
        counts[name] = len(listing)
    assert counts[v4.RUNG.name] != counts[interleaved.name]  # the define reached the build


@pytest.mark.parametrize("C,k,left,right",
                         [(1024, 0, "8-way", "no conflict"), (776, 5, "8-way", "no conflict"),
                                            (8, 3, "no conflict", "no conflict")])
def test_staging_banks_figure(C, k, left, right):
    fig = lesson06.v4_staging_banks(C, k)
    assert fig.dpi == plots.DPI and fig.get_size_inches()[0] <= plots.FIGSIZE[0]
    titles = [ax.get_title() for ax in fig.axes]
    assert titles[0].startswith("interleaved") and left in titles[0], titles
    assert titles[1].startswith("planar") and right in titles[1], titles


@pytest.mark.gpu
@pytest.mark.parametrize("N,C", [(1031, 776), (517, 2056), (33, 8192), (1, 8)])
def test_both_layouts_match_the_reference(interleaved, N, C):
    for name in (v4.RUNG.name, interleaved.name):
        report = compare.check_version(name, N, C, seed=N + C)
        assert report.ok, report
