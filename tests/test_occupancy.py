"""Occupancy on the CPU (the calculator's rules from ptxas's report and the plan, the blocks per SM
a plan launches) and, on a GPU, the calculator against the driver's own answer.
"""
import dataclasses

import pytest

import rmsnorm_lessons as rl
from rmsnorm_lessons.core import build, gpu, ladder
from rmsnorm_lessons.inspection import occupancy

ARCHES = ("sm_80", "sm_90")
needs_nvcc = pytest.mark.skipif(build.find_nvcc() is None, reason="nvcc not installed")


def test_occupancy_known_cases():
    # the seed's kernel10: 512 threads, 64 registers -> 2048 registers a warp, 8 warps per SM
    # quarter, 32 warps per SM: two blocks of 16 warps, limited by registers (shared memory would
    # allow 4)
    o = occupancy.from_resources(64, 16, 512, 48128, "sm_90")
    assert (o.blocks_per_sm, o.warps_per_sm, o.max_warps_per_sm) == (2, 32, 64)
    assert o.limiter == "registers" and o.blocks_by["shared memory"] == 4
    assert o.smem_per_block == 49280 and abs(o.occupancy - 0.5) < 1e-9
    # 32 registers, 256 threads: 8 blocks, 64 warps: registers and warp slots both full
    o = occupancy.from_resources(32, 0, 256, 0, "sm_90")
    assert o.blocks_per_sm == 8 and o.warps_per_sm == 64
    assert "warps" in o.limiter and "registers" in o.limiter
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
    assert occupancy.from_resources(32, 0, 1024, 0, "sm_90",
                                    max_threads_per_block=512).limiter == "launch bounds"
    with pytest.raises(ValueError, match="sm_80"):
        occupancy.limits("sm_70")


@needs_nvcc
@pytest.mark.parametrize("arch", ARCHES)
def test_occupancy_of_versions(arch):
    for v in ladder.VERSIONS:
        spec = ladder.get(v)
        C = 4096
        o = occupancy.occupancy(v, C, arch)
        # the launch the occupancy is of
        first = ladder.plan(v, 1 << 20, C, occupancy.device_like(arch))[0]
        res = build.resources(v, arch)[first.kernel]
        assert first.kernel in spec.kernels
        assert o.registers == res.registers and o.static_smem == res.shared_bytes
        assert (o.kernel, o.block_size, o.dynamic_smem) == (first.kernel, first.block, first.shared)
        # sized to the arch's shared memory a block
        if first.kernel == "rmsnorm_backward_v7_staged":
            assert o.dynamic_smem <= occupancy.limits(arch).shared_per_block_optin - 1024
            assert o.blocks_per_sm == 1
        else:
            assert o.dynamic_smem <= ladder.shared_memory(v, C)  # what the launcher opts in to
        assert 1 <= o.blocks_per_sm <= 32 and o.warps_per_sm <= o.max_warps_per_sm == 64
        assert o.warps_per_sm == o.blocks_per_sm * o.block_size // 32
        assert o.limiter and o.limiter in o.summary() and "registers:" in o.explain()
    v6 = occupancy.occupancy("v6_last_block", 4096, arch)
    if v6.registers == 64:  # what ptxas gives under __launch_bounds__(512, 2)
        assert (v6.blocks_per_sm, v6.limiter) == (2, "registers")
    # bounds
    assert occupancy.occupancy("v6_last_block", 4096, arch, block_size=1024).blocks_per_sm == 0
    assert occupancy.occupancy("v6_last_block", 4096, arch, registers=128).blocks_per_sm == 1
    assert occupancy.occupancy("v5_two_pass", 768, arch,
                               kernel="reduce_dweight_v5").dynamic_smem == 0
    assert "v6_last_block" in occupancy.table(arch=arch)


# --------------------------------------------------------------------------------------------------
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
@pytest.mark.parametrize("version", ladder.VERSIONS)
def test_occupancy_matches_the_driver(version):
    arch = rl.gpu.facts().arch
    if arch not in occupancy.LIMITS:
        pytest.skip(f"no limits table for {arch}")
    spec = ladder.get(version)
    checked = 0
    for kernel in spec.kernels:
        for block in (64, 128, 256, 512, 1024):
            for C in (768, 4096, 16384):
                if kernel != spec.kernels[0] and C != 768:
                    continue
                try:
                    ours = occupancy.occupancy(version, C, arch, block_size=block, kernel=kernel)
                # the plan refuses this block at this C (v7_fast: a row per block)
                except ValueError:
                    continue
                # cannot launch at all (bounds, shared memory): not asked
                if ours.blocks_per_sm == 0:
                    continue
                theirs = occupancy.driver_blocks_per_sm(version, C, block, kernel=kernel, arch=arch)
                assert theirs.registers == ours.registers, (kernel, block, C)
                assert theirs.static_smem == ours.static_smem, (kernel, block, C)
                assert theirs.blocks_per_sm == ours.blocks_per_sm, (
                    f"{kernel} block {block} C={C}: driver {theirs.blocks_per_sm}, ours "
                    f"{ours.explain()}")
                checked += 1
    assert checked > 0


# --- the blocks per SM the plans launch (the shared-memory chart draws them) ----------------------


@pytest.mark.parametrize("version,per_sm",
                         [(r.name, getattr(getattr(ladder, r.name), "BLOCKS_PER_SM", None))
                          for r in ladder.SHIPPED if r.config_check is None])
def test_plan_blocks_per_sm_is_read_from_the_plans(version, per_sm):
    # what the shared-memory chart and summary draw as "the plan launches k per SM"
    assert occupancy.plan_blocks_per_sm(version, 1024) == per_sm
    if per_sm is not None:
        assert per_sm == getattr(ladder, version).BLOCKS_PER_SM
        for sms in (1, 108, 132):
            device = dataclasses.replace(gpu.H200, multiprocessors=sms)
            assert ladder.plan(version, 1 << 22, 1024, device)[0].grid == per_sm * sms
