"""Occupancy on the architectures the lessons compare (sm_80, sm_89, sm_90, sm_100, sm_120) and on
Turing (sm_75), no GPU needed: the limits tables hold the CUDA programming guide's figures,
hand-worked cases come out right, the per-arch table of a rung renders for every arch
(compiled by nvcc for each), and v5 across the archs is what lesson 07, the lesson that compares
them, says (lesson 04 points there)."""
import pytest
from _lesson_support import cells as _cells

from rmsnorm_lessons.core import build, gpu, ladder
from rmsnorm_lessons.inspection import occupancy

needs_nvcc = pytest.mark.skipif(build.find_nvcc() is None, reason="nvcc not installed")
KIB = 1024


@pytest.mark.parametrize("arch, warps, blocks, per_sm, optin", [
    # the guide's "Technical Specifications per Compute Capability" (and CCCL's arch_traits.h)
    ("sm_80", 64, 32, 164, 163),
    ("sm_89", 48, 24, 100, 99),
    ("sm_90", 64, 32, 228, 227),
    ("sm_100", 64, 32, 228, 227),
    ("sm_120", 48, 24, 100, 99),
])
def test_limits_of_the_lesson_arches(arch, warps, blocks, per_sm, optin):
    L = occupancy.limits(arch)
    assert (L.max_warps_per_sm, L.max_blocks_per_sm) == (warps, blocks)
    assert (L.shared_per_sm, L.shared_per_block_optin) == (per_sm * KIB, optin * KIB)
    assert L.shared_per_sm == max(L.carveouts_kib) * KIB  # the largest carveout is the default
    assert (L.registers_per_sm, L.registers_per_block,
            L.max_registers_per_thread) == (65536, 65536, 255)
    assert L.reserved_shared_per_block == 1 * KIB and L.shared_per_block == 48 * KIB
    assert occupancy.limits(arch + "a") == L  # sm_100a, sm_120a: the same SM
    assert arch in occupancy.LESSON_ARCHES and occupancy.GPUS[arch]


def test_limits_of_turing():
    # the guide's table for 7.5, its 7.x section for the carveouts; CCCL's arch_traits<sm_75> too
    L = occupancy.limits("sm_75")
    assert (L.max_warps_per_sm, L.max_threads_per_sm, L.max_blocks_per_sm) == (32, 1024, 16)
    assert (L.shared_per_sm, L.shared_per_block_optin, L.shared_per_block) == (64 * KIB, 64 * KIB,
                                                                                 48 * KIB)
    assert L.carveouts_kib == (0, 32, 64) and L.shared_per_sm == max(L.carveouts_kib) * KIB
    # no 1 KiB a block before sm_80, and shared memory in units of 256 B (cuda_occupancy.h)
    assert (L.reserved_shared_per_block, L.shared_unit) == (0, 256)
    assert (L.registers_per_sm, L.registers_per_block, L.max_registers_per_thread) == (65536,
                                                                                      65536, 255)
    assert occupancy.GPUS["sm_75"].startswith("T4") and "sm_75" not in occupancy.LESSON_ARCHES


def test_hand_worked_cases_on_turing():
    # 32 registers a thread, 256 threads, 100 B of static shared memory: registers allow 8 blocks
    # of 8 warps on both, but sm_75 has 32 warp slots (4 blocks), sm_80 64 (8 blocks)
    o = occupancy.from_resources(32, 100, 256, 0, "sm_75")
    assert (o.blocks_per_sm, o.warps_per_sm, o.limiter) == (4, 32, "warps")
    assert o.smem_per_block == 256  # 100 B rounded to 256, nothing reserved
    o = occupancy.from_resources(32, 100, 256, 0, "sm_80")
    assert (o.blocks_per_sm, o.smem_per_block) == (8, 1152)  # 100 + 1024 reserved, in 128 B units
    # v3_smem at C = 16384 on a T4: 64 KiB dynamic is all a block may have; one byte more is refused
    o = occupancy.from_resources(48, 0, 256, 64 * KIB, "sm_75")
    assert (o.smem_per_block, o.blocks_per_sm, o.limiter) == (64 * KIB, 1, "shared memory")
    o = occupancy.from_resources(48, 0, 256, 64 * KIB + 1, "sm_75")
    assert o.blocks_per_sm == 0 and "more than a block may use (65536 B)" in o.notes[0]
    # 1024 threads: a whole sm_75 SM (32 warps), half an sm_80's
    assert occupancy.from_resources(32, 256, 1024, 0, "sm_75").warps_per_sm == 32
    assert occupancy.from_resources(32, 256, 1024, 0, "sm_80").blocks_per_sm == 2


def test_hand_worked_cases_on_blackwell():
    # 32 registers a thread, 256 threads, no shared memory of its own (1 KiB reserved):
    # registers: 32 x 32 = 1024 a warp; a quarter's 16384 hold 16 warps, 64 an SM: 8 blocks of 8
    # warps. sm_100 has 64 warp slots (8 blocks), sm_120 only 48 (6 blocks): the warps limit it
    # there.
    o = occupancy.from_resources(32, 0, 256, 0, "sm_100")
    assert (o.blocks_per_sm, o.warps_per_sm, o.limiter) == (8, 64, "registers and warps")
    o = occupancy.from_resources(32, 0, 256, 0, "sm_120")
    assert (o.blocks_per_sm, o.warps_per_sm, o.limiter) == (6, 48, "warps")
    assert o.occupancy == 1.0
    # one-warp blocks of 16 registers: 32 block slots on sm_100, 24 on sm_120
    assert occupancy.from_resources(16, 0, 32, 0, "sm_100").blocks_per_sm == 32
    o = occupancy.from_resources(16, 0, 32, 0, "sm_120")
    assert (o.blocks_per_sm, o.limiter) == (24, "blocks")
    # v3_smem at C = 16384: 64 KiB dynamic + 1 KiB reserved = 66560 B a block.
    # sm_100: 233472 // 66560 = 3 blocks; sm_120: 102400 // 66560 = 1 block.
    o = occupancy.from_resources(48, 0, 256, 16384 * 4, "sm_100")
    assert (o.smem_per_block, o.blocks_per_sm, o.limiter) == (66560, 3, "shared memory")
    o = occupancy.from_resources(48, 0, 256, 16384 * 4, "sm_120")
    assert (o.smem_per_block, o.blocks_per_sm, o.limiter) == (66560, 1, "shared memory")
    # 100 KiB a block: fits sm_100 twice, not sm_120 at all (99 KiB at most a block)
    assert occupancy.from_resources(32, 0, 128, 100 * KIB, "sm_100").blocks_per_sm == 2
    o = occupancy.from_resources(32, 0, 128, 100 * KIB, "sm_120")
    assert o.blocks_per_sm == 0 and "more than a block may use" in o.notes[0]
    # above 48 KiB without opting in: refused on both
    assert occupancy.from_resources(32, 0, 128, 60 * KIB, "sm_120", opt_in=False).blocks_per_sm == 0
    # sm_90 models named-barrier slots, the Blackwell rows do not (no published figure)
    assert "barriers" not in occupancy.from_resources(128, 672, 512, 0, "sm_100",
                                                      barriers=16).blocks_by


def test_limits_text_and_the_fallback_label():
    text = occupancy.limits_text("sm_120")
    assert "48 (1536 threads)" in text and "24" in text and "100 KiB" in text and "99 KiB" in text
    if not gpu.available():  # without a GPU: the H200's row, labelled as saved facts
        d = occupancy.device_limits_text()
        assert d.startswith("NVIDIA H200 (saved facts of") and "sm_90" in d and "228 KiB" in d


@needs_nvcc
@pytest.mark.parametrize("version", ladder.VERSIONS)
def test_every_rung_renders_on_every_lesson_arch(version):
    table = occupancy.across_archs(version, 4096)
    lines = table.splitlines()
    assert len(lines) == 1 + len(occupancy.LESSON_ARCHES)
    for arch, line in zip(occupancy.LESSON_ARCHES, lines[1:]):
        # all rungs build for all five
        assert line.startswith(arch) and "cannot be compiled" not in line
        o = occupancy.occupancy(version, 4096, arch)
        assert 1 <= o.blocks_per_sm <= occupancy.limits(arch).max_blocks_per_sm
        assert f"{o.warps_per_sm:>5}/{o.max_warps_per_sm:<2}" in line and o.limiter in line


@needs_nvcc
def test_v3_across_arches_at_a_wide_row():
    # the lesson 04 table: at C = 16384 shared memory limits every arch, and the 100 KiB SMs hold
    # one block
    o = {a: occupancy.occupancy("v3_smem", 16384, a) for a in occupancy.LESSON_ARCHES}
    assert {a: x.blocks_per_sm for a, x in o.items()} == \
        {"sm_80": 2, "sm_89": 1, "sm_90": 3, "sm_100": 3, "sm_120": 1}
    assert all(x.limiter == "shared memory" for x in o.values())


@needs_nvcc
def test_a_rung_that_cannot_compile_gets_a_line(monkeypatch):
    real = build.resources

    def refuse(name, arch=build.DEFAULT_ARCH):
        if arch == "sm_120":
            raise build.CompileError("nvcc failed for v3_smem (sm_120):\nx.cu(1): error: not on "
                                     "this arch")
        return real(name, arch)

    monkeypatch.setattr(build, "resources", refuse)
    lines = occupancy.across_archs("v3_smem", 1024).splitlines()
    assert lines[-1].startswith("sm_120") and "cannot be compiled for sm_120" in lines[-1]
    assert "not on this arch" in lines[-1]
    assert "cannot be compiled for sm_120" in occupancy.table(["v3_smem"], arch="sm_120")


def test_device_limits_text_reads_the_driver_on_a_gpu(monkeypatch):
    # the GPU branch, on a fake device (an RTX PRO 6000-like sm_120): figures come from the driver,
    # not the table
    fake = gpu.DeviceFacts(name="Fake Blackwell", compute_capability=(12, 0), multiprocessors=188,
                           shared_memory_per_block=48 * KIB, shared_memory_per_block_optin=99 * KIB,
                           shared_memory_per_multiprocessor=100 * KIB,
                           max_threads_per_multiprocessor=1536,
                           registers_per_multiprocessor=65536, l2_bytes=128 << 20,
                           total_memory=96 << 30,
                           driver_version=13000)
    driver = {"multiprocessor_count": 188, "max_threads_per_multiprocessor": 1536,
              "max_blocks_per_multiprocessor": 24,
              "max_registers_per_multiprocessor": 65536,
              "max_shared_memory_per_multiprocessor": 100 * KIB,
              "max_shared_memory_per_block": 48 * KIB,
              "max_shared_memory_per_block_optin": 99 * KIB,
              "reserved_shared_memory_per_block": 1024}
    monkeypatch.setattr(gpu, "available", lambda: True)
    monkeypatch.setattr(gpu, "facts_or_fallback", lambda: (fake, "Fake Blackwell (this GPU)"))
    monkeypatch.setattr(occupancy, "device_limits", lambda: driver)
    text = occupancy.device_limits_text()
    assert text.startswith("Fake Blackwell (this GPU), sm_120, 188 SMs (read from the driver)")
    assert "48 (1536 threads)" in text and "100 KiB" in text and "99 KiB after opting in" in text

    def broken():
        raise RuntimeError("cuDeviceGetAttribute failed")

    monkeypatch.setattr(occupancy, "device_limits", broken)  # falls back to the table, and says so
    text = occupancy.device_limits_text()
    assert "the sm_120 table" in text and "could not be read" in text and "24" in text


# --- occupancy across the archs in the lessons: lesson 07 compares them, 04 points there ----------


def test_occupancy_lives_in_lesson_07_and_lesson_04_points_there():
    prose04 = "".join("".join(c["source"]) for c in _cells("04_shared_memory"))
    assert "across_archs" not in prose04 and "lesson 07" in prose04
    code07 = "".join("".join(c["source"]) for c in _cells("07_two_pass"))
    assert 'occupancy("v5_two_pass", 2048, a)' in code07 and "LESSON_ARCHES" in code07


@pytest.mark.skipif(build.find_nvcc() is None, reason="nvcc not found")
def test_v5_across_arches_as_lesson_07_says():
    # registers decide at C = 2048 (the launch bounds give 2 blocks everywhere); at C = 16384 the
    # 100 KiB SMs hold one block, so half the plan's blocks wait for a second wave
    for C, want in ((2048, {"sm_80": 2, "sm_89": 2, "sm_90": 2, "sm_100": 2, "sm_120": 2}),
                    (16384, {"sm_80": 2, "sm_89": 1, "sm_90": 2, "sm_100": 2, "sm_120": 1})):
        o = {a: occupancy.occupancy("v5_two_pass", C, a) for a in occupancy.LESSON_ARCHES}
        assert {a: x.blocks_per_sm for a, x in o.items()} == want
    assert occupancy.occupancy("v5_two_pass", 2048, "sm_90").limiter == "registers"
    assert occupancy.occupancy("v5_two_pass", 16384, "sm_89").limiter == "shared memory"
