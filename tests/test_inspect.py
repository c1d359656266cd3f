"""inspect and occupancy: ptxas resources, marked SASS, occupancy on the CPU; the driver's on a GPU."""
import subprocess
import sys

import pytest

import rmsnorm_lessons as rl
from rmsnorm_lessons import build, inspect, kernels, occupancy

ARCHES = ("sm_80", "sm_90")
needs_cuobjdump = pytest.mark.skipif(
    build.find_tool("cuobjdump") is None or build.find_tool("nvdisasm") is None,
    reason="cuobjdump/nvdisasm not installed (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)")
needs_nvcc = pytest.mark.skipif(build.find_nvcc() is None, reason="nvcc not installed")


@needs_nvcc
@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("version", kernels.VERSIONS)
def test_resources_parse(version, arch):
    res = inspect.resources(version, arch)
    spec = kernels.get(version)
    assert set(spec.kernels) <= set(res), f"ptxas reported {sorted(res)}"
    for name in spec.kernels:
        r = res[name]
        assert r.arch == arch
        assert 1 <= r.registers <= 255
        assert r.shared_bytes >= 0 and r.stack_bytes >= 0
        assert name in inspect.describe(r) and f"{r.registers} registers" in inspect.describe(r)


@needs_nvcc
def test_ptx_and_launch_bounds():
    text = inspect.ptx("v6_last_block", "sm_90")
    assert ".entry rmsnorm_backward_v6" in text and ".target sm_90" in text
    assert inspect.max_threads_per_block("v6_last_block", "rmsnorm_backward_v6") == 512
    assert inspect.max_threads_per_block("v2_warp", "rmsnorm_backward_v2") is None


def test_classify():
    assert inspect.classify("LDG.E.128")[1] == ("LDG", "LDG.128")
    assert inspect.classify("LDG.E.EF.128")[0].startswith("128-bit load")
    assert "evict-first" in inspect.classify("LDG.E.EF.128")[0]
    assert inspect.classify("STG.E.128.STRONG.GPU")[1] == ("STG", "STG.128")
    assert inspect.classify("LDG.E.LTC128B.128")[1] == ("LDG", "LDG.128")
    assert inspect.classify("LDG.E.LTC128B")[1] == ("LDG",)  # a prefetch hint, not a 128-bit load
    assert inspect.classify("LDG.E.U16")[0] == "16-bit global load"
    assert inspect.classify("SHFL.BFLY")[1] == ("SHFL",)
    assert inspect.classify("ATOMS.CAST.SPIN")[1] == ("ATOM", "ATOMS")
    assert inspect.classify("ATOMG.E.INC.STRONG.GPU")[1] == ("ATOM", "ATOMG")
    assert inspect.classify("REDG.E.ADD.F32.FTZ.RN.STRONG.GPU")[1] == ("RED",)
    assert inspect.classify("RED.E.ADD.F32.FTZ.RN.STRONG.GPU")[1] == ("RED",)
    assert inspect.classify("REDUX.SUM")[1] == ("REDUX",)
    assert inspect.classify("BAR.SYNC.DEFER_BLOCKING")[1] == ("BAR",)
    assert inspect.classify("BSSY")[1] == () and inspect.classify("DEPBAR.LE")[1] == ()
    assert inspect.classify("MEMBAR.SC.GPU")[1] == ("MEMBAR",)
    assert inspect.classify("FENCE.VIEW.ASYNC.S")[1] == ("FENCE",)


def test_parse_sass_sample():
    raw = """
\tcode for sm_90
\t\tFunction : k
\t.headerflags\t@"EF_CUDA_SM90"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                 /* 0x00000a00ff017b82 */
                                                                          /* 0x000e220000000800 */
        /*0010*/              @!P0 LDG.E.128 R4, desc[UR6][R2.64] ;       /* 0x0000000602047981 */
        /*0020*/                   SHFL.BFLY PT, R5, R4, 0x10, 0x1f ;     /* 0x0e001f0004057f89 */
        /*0030*/                   NOP;                                   /* 0x0000000000007918 */
"""
    lst = inspect.parse_sass(raw, "k", "sm_90")
    f = lst.functions["k"]
    assert [i.opcode for i in f.instructions] == ["LDC", "LDG.E.128", "SHFL.BFLY", "NOP"]
    assert f.instructions[1].mark == "128-bit load" and f.instructions[1].text.startswith("@!P0 ")
    counts = inspect._count_instructions(f.instructions)
    assert counts["LDG.128"] == 1 and counts["SHFL"] == 1 and counts["instructions"] == 3


@needs_nvcc
@needs_cuobjdump
@pytest.mark.parametrize("arch", ARCHES)
def test_sass_marks_what_each_version_adds(arch):
    c = {v: inspect.count(v, arch) for v in kernels.VERSIONS}
    for v, counts in c.items():
        for key in ("LDG.128", "STG.128", "LDG", "STG", "SHFL", "ATOM", "RED", "BAR", "MEMBAR"):
            assert key in counts, (v, key)
        assert counts["instructions"] > 0
        assert counts["LDG"] >= counts["LDG.128"] and counts["STG"] >= counts["STG.128"]
    assert c["v1_naive"]["LDG.128"] == 0 and c["v1_naive"]["SHFL"] == 0
    assert c["v2_warp"]["SHFL"] > 0
    assert c["v3_smem"]["ATOMS"] > 0 or c["v3_smem"]["RED"] > 0
    for v in ("v4_vec_bf16", "v5_two_pass", "v6_last_block"):
        assert c[v]["LDG.128"] > 0, v
        assert c[v]["STG.128"] > 0, v
    assert c["v6_last_block"]["MEMBAR"] + c["v6_last_block"]["FENCE"] > 0
    assert c["v6_last_block"]["ATOMG"] > 0  # the atomicInc ticket


@needs_nvcc
@needs_cuobjdump
def test_sass_listing_is_marked():
    text = inspect.sass("v6_last_block", "sm_90")
    assert "// rmsnorm_backward_v6 (sm_90)" in text
    assert "<< 128-bit load" in text and "<< warp shuffle" in text and "<< memory fence" in text
    assert "/* 0x" not in text  # encodings stripped
    plain = inspect.sass("v6_last_block", "sm_90", marked=False)
    assert "<<" not in plain and "LDG.E.128" in plain
    assert text.count("<< 128-bit load") == inspect.count("v6_last_block", "sm_90")["LDG.128"]
    assert inspect.marked_lines("v2_warp", key="SHFL")
    one = inspect.count("v4_vec_bf16", "sm_90", kernel="add_dweight_v4")
    assert one["LDG.128"] == 0 and one["instructions"] < inspect.count("v4_vec_bf16", "sm_90")["instructions"]
    with pytest.raises(ValueError, match="add_dweight_v4"):
        inspect.count("v4_vec_bf16", "sm_90", kernel="nope")


@needs_nvcc
@needs_cuobjdump
def test_report_and_other_files():
    r = inspect.report("v6_last_block", "sm_90")
    assert "64 registers" in r and "128-bit loads:" in r and "limited by registers" in r
    assert "gpu_sleep" in inspect.report("timing", "sm_90")
    assert inspect.count("rmsnorm_forward", "sm_80")["SHFL"] > 0


def test_unknown_file_is_a_clear_error():
    with pytest.raises(FileNotFoundError, match="known: .*v6_last_block"):
        inspect.count("v9_nope")


@needs_nvcc
def test_missing_cuobjdump_says_how_to_get_it(monkeypatch):
    real = build.find_tool
    monkeypatch.setattr(build, "find_tool", lambda tool: None if tool == "cuobjdump" else real(tool))
    inspect._listing_cached.cache_clear()
    try:
        with pytest.raises(inspect.ToolMissing, match="pip install nvidia-cuda-cuobjdump"):
            inspect.sass("v2_warp", "sm_90")
        # the report still gives the resources and says why the counts are missing
        r = inspect.report("v2_warp", "sm_90")
        assert "rmsnorm_backward_v2 (sm_90):" in r and "registers" in r
        assert "SASS counts unavailable" in r
    finally:
        inspect._listing_cached.cache_clear()


@needs_nvcc
@needs_cuobjdump
def test_cli_inspect_prints_resources_and_128_bit_loads():
    cmd = [sys.executable, "-m", "rmsnorm_lessons", "inspect", "v6_last_block", "--arch", "sm_90"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "rmsnorm_backward_v6 (sm_90): " in out.stdout and " registers, " in out.stdout
    assert "128-bit loads: " in out.stdout and "limited by" in out.stdout
    out = subprocess.run(cmd + ["--sass"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "<< 128-bit load" in out.stdout


# ----------------------------------------------------------------------------------------------------
# occupancy on the CPU


def test_occupancy_known_cases():
    # the seed's kernel10: 512 threads, 64 registers -> 2048 registers a warp, 8 warps per SM quarter,
    # 32 warps per SM: two blocks of 16 warps, limited by registers (shared memory would allow 4)
    o = occupancy.from_resources(64, 16, 512, 48128, "sm_90")
    assert (o.blocks_per_sm, o.warps_per_sm, o.max_warps_per_sm) == (2, 32, 64)
    assert o.limiter == "registers" and o.blocks_by["shared memory"] == 4
    assert o.smem_per_block == 49280 and abs(o.occupancy - 0.5) < 1e-9
    # 32 registers, 256 threads: 8 blocks, 64 warps: registers and warp slots both full
    o = occupancy.from_resources(32, 0, 256, 0, "sm_90")
    assert o.blocks_per_sm == 8 and o.warps_per_sm == 64 and "warps" in o.limiter and "registers" in o.limiter
    # 40 registers round to 1280 a warp: 12 warps per quarter, 48 warps, 6 blocks of 8 warps
    assert occupancy.from_resources(40, 0, 256, 0, "sm_90").blocks_per_sm == 6
    # tiny blocks: the 32-blocks-per-SM slot limit
    o = occupancy.from_resources(16, 0, 32, 0, "sm_80")
    assert o.blocks_per_sm == 32 and o.limiter == "blocks"
    # shared memory: 100 KiB a block -> 2 on sm_90 (228 KiB), 1 on sm_80 (164 KiB)
    assert occupancy.from_resources(32, 0, 128, 100 * 1024, "sm_90").blocks_per_sm == 2
    o = occupancy.from_resources(32, 0, 128, 100 * 1024, "sm_80")
    assert o.blocks_per_sm == 1 and o.limiter == "shared memory"
    # more than a block may have: 0, with the reason
    o = occupancy.from_resources(32, 0, 128, 230 * 1024, "sm_90")
    assert o.blocks_per_sm == 0 and o.limiter == "shared memory" and o.notes
    o = occupancy.from_resources(32, 0, 128, 60 * 1024, "sm_90", opt_in=False)
    assert o.blocks_per_sm == 0 and "without opting in" in o.notes[0]
    # 72 registers x 1024 threads is more than 65536 registers: no block fits
    o = occupancy.from_resources(72, 0, 1024, 0, "sm_90")
    assert o.blocks_per_sm == 0 and o.limiter == "registers"
    # launch bounds
    assert occupancy.from_resources(32, 0, 1024, 0, "sm_90", max_threads_per_block=512).limiter == "launch bounds"
    with pytest.raises(ValueError, match="sm_80"):
        occupancy.limits("sm_70")


@needs_nvcc
@pytest.mark.parametrize("arch", ARCHES)
def test_occupancy_of_versions(arch):
    for v in kernels.VERSIONS:
        spec = kernels.get(v)
        C = 4096
        o = occupancy.occupancy(v, C, arch)
        res = build.resources(v, arch)[spec.kernels[0]]
        assert o.registers == res.registers and o.static_smem == res.shared_bytes
        assert o.dynamic_smem == spec.dynamic_smem(C, spec.block_size)
        assert 1 <= o.blocks_per_sm <= 32 and o.warps_per_sm <= o.max_warps_per_sm == 64
        assert o.warps_per_sm == o.blocks_per_sm * spec.block_size // 32
        assert o.limiter and o.limiter in o.summary() and "registers:" in o.explain()
    v6 = occupancy.occupancy("v6_last_block", 4096, arch)
    if v6.registers == 64:  # what ptxas gives under __launch_bounds__(512, 2)
        assert (v6.blocks_per_sm, v6.limiter) == (2, "registers")
    assert occupancy.occupancy("v6_last_block", 4096, arch, block_size=1024).blocks_per_sm == 0  # bounds
    assert occupancy.occupancy("v6_last_block", 4096, arch, registers=128).blocks_per_sm == 1
    assert occupancy.occupancy("v5_two_pass", 768, arch, kernel="reduce_dweight_v5").dynamic_smem == 0
    assert "v6_last_block" in occupancy.table(arch=arch)


# ----------------------------------------------------------------------------------------------------
# on a GPU: the calculator against the driver


@pytest.mark.gpu
def test_limits_match_the_device():
    arch = rl.gpu.facts().arch
    if arch not in occupancy.LIMITS:
        pytest.skip(f"no limits table for {arch}")
    L = occupancy.limits(arch)
    d = occupancy.device_limits()
    assert d["max_shared_memory_per_multiprocessor"] == L.shared_per_sm
    assert d["max_shared_memory_per_block_optin"] == L.shared_per_block_optin
    assert d["max_shared_memory_per_block"] == L.shared_per_block
    assert d["reserved_shared_memory_per_block"] == L.reserved_shared_per_block
    assert d["max_registers_per_multiprocessor"] == L.registers_per_sm
    assert d["max_registers_per_block"] == L.registers_per_block
    assert d["max_threads_per_multiprocessor"] == L.max_threads_per_sm
    assert d["max_blocks_per_multiprocessor"] == L.max_blocks_per_sm
    assert d["max_threads_per_block"] == L.max_threads_per_block


@pytest.mark.gpu
@pytest.mark.parametrize("version", kernels.VERSIONS)
def test_occupancy_matches_the_driver(version):
    arch = rl.gpu.facts().arch
    if arch not in occupancy.LIMITS:
        pytest.skip(f"no limits table for {arch}")
    spec = kernels.get(version)
    checked = 0
    for kernel in spec.kernels:
        for block in (64, 128, 256, 512, 1024):
            for C in (768, 4096, 16384):
                if kernel != spec.kernels[0] and C != 768:
                    continue
                ours = occupancy.occupancy(version, C, arch, block_size=block, kernel=kernel)
                if ours.blocks_per_sm == 0:  # cannot launch at all (bounds, shared memory): not asked
                    continue
                theirs = occupancy.driver_blocks_per_sm(version, C, block, kernel=kernel, arch=arch)
                assert theirs.registers == ours.registers, (kernel, block, C)
                assert theirs.static_smem == ours.static_smem, (kernel, block, C)
                assert theirs.blocks_per_sm == ours.blocks_per_sm, (
                    f"{kernel} block {block} C={C}: driver {theirs.blocks_per_sm}, ours {ours.explain()}")
                checked += 1
    assert checked > 0
