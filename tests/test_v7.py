"""v7_fast's plan (CPU): K and the row group from C, shared memory and barriers at every C, wide
rows split across clusters, the launch, the kernel's index arithmetic mirrored in NumPy, and its
resources.

The plan is data (``ladder.plan("v7_fast", ...)`` on ``gpu.H200``); its variants are chosen with
``ladder.v7_fast.Config``, never with globals or environment variables. The version itself is also
in every parametrized test over ``rl.ladder.VERSIONS``. On the GPU: tests/test_v7_gpu.py; the
bench's rows, the peers, the streaming ceiling and lesson 10's exercise: tests/test_v7_measure.py.
"""
import dataclasses
import re

import pytest

import rmsnorm_lessons as rl
from rmsnorm_lessons.core import build, gpu, ladder, launch
from rmsnorm_lessons.core.ladder import ceil_div, v7_fast
from rmsnorm_lessons.core.ladder.v7_fast import Config, row_layout

H200_SMS = 132
OPTIN_H200 = 232448  # shared memory a block may have on sm_90 after opting in
OPTIN_A100 = 166912
V7 = rl.ladder.get("v7_fast")


def plan(N, C, block_size=None, overwrite=False, config=None, device=gpu.H200):
    return ladder.plan(V7, N, C, device, block_size=block_size, overwrite=overwrite, config=config)


def args(launch_):
    return dict(launch_.args)


# --------------------------------------------------------------------------------------------------
# the plan (CPU)

# C: (K, G, groups per block, block) in overwrite mode, and accumulate mode outside 1024..8192
EXPECTED = {
    8: (1, 32, 16, 512), 264: (2, 32, 16, 512), 768: (3, 32, 16, 512), 776: (4, 32, 16, 512),
    1024: (4, 32, 16, 512), 1032: (4, 64, 8, 512), 1600: (4, 64, 8, 512), 2048: (4, 64, 8, 512),
    4096: (4, 128, 4, 512), 5120: (4, 160, 3, 480), 8192: (4, 256, 2, 512), 12288: (4, 384, 1, 384),
    16384: (4, 512, 1, 512),
}
# C: (G, groups, block) in accumulate mode for 1024 <= C <= 8192: K = 2, prefetching
EXPECTED_PREFETCH = {
    1024: (64, 8, 512), 1032: (96, 5, 480), 1600: (128, 4, 512), 2048: (128, 4, 512),
    4096: (256, 2, 512),
    5120: (320, 1, 320), 8192: (512, 1, 512),
}


@pytest.mark.parametrize("C", sorted(EXPECTED))
@pytest.mark.parametrize("overwrite", [False, True])
def test_plan_picks_K_and_the_row_group_from_C(C, overwrite):
    s = row_layout(C, overwrite=overwrite)
    if overwrite or C not in EXPECTED_PREFETCH:
        assert (s.K, s.group, s.groups, s.block, s.prefetch) == EXPECTED[C] + (False,)
    else:
        want = (2,) + EXPECTED_PREFETCH[C] + (True,)
        assert (s.K, s.group, s.groups, s.block, s.prefetch) == want
    assert s.prefetch == (not overwrite and 1024 <= C <= 8192)
    # covers the row, no spare warp
    assert s.group % 32 == 0 and s.group * s.K * 8 >= C > (s.group - 32) * s.K * 8
    assert s.block == s.groups * s.group <= v7_fast.MAX_BLOCK
    assert s.smem == max(s.groups * C * 4, s.block * 16) <= ladder.shared_memory(V7, C, 512)
    both = max(row_layout(C, overwrite=m).smem for m in (False, True))
    assert ladder.shared_memory(V7, C, 512) == both
    # the plan launches exactly this layout on the register path (staged by default at
    # 1024 <= C <= 16384)
    main = plan(5000, C, overwrite=overwrite, config=Config(staged=False))[0]
    assert main.kernel == "rmsnorm_backward_v7"
    assert (main.block, main.shared) == (s.block, s.smem)
    assert (args(main)["G"], args(main)["K"], args(main)["prefetch"]) == (s.group, s.K,
                                                                          int(s.prefetch))


def test_prefetch_needs_K_2():
    assert row_layout(2048, prefetch=True).K == 2
    assert not row_layout(2048, K=2).prefetch  # an explicit K alone does not prefetch
    with pytest.raises(ValueError, match=r"prefetch needs K = 2 .*got K=4"):
        row_layout(2048, K=4, prefetch=True)
    assert row_layout(2048, prefetch=False) == row_layout(2048, overwrite=True)
    assert row_layout(768, prefetch=True).prefetch and row_layout(768, overwrite=True,
                                                                  prefetch=True).prefetch
    # the same through a Config
    off = v7_fast.resolve(5000, 2048, gpu.H200, config=Config(prefetch=False))
    assert off.layout == row_layout(2048, overwrite=True)
    on = plan(5000, 768, config=Config(prefetch=True))[0]
    assert (args(on)["prefetch"], args(on)["K"]) == (1, 2)
    with pytest.raises(ValueError, match=r"prefetch needs K = 2"):
        plan(5000, 2048, config=Config(K=4, prefetch=True))


@pytest.mark.parametrize("C", list(range(8, 16385, 8 * 97)) + [16384])
@pytest.mark.parametrize("overwrite", [False, True])
def test_every_C_fits_the_shared_memory_and_the_barriers(C, overwrite):
    s = row_layout(C, overwrite=overwrite)
    # the groups' dweight slices: at most 64 KiB
    assert s.smem <= 64 * 1024 <= OPTIN_A100 < OPTIN_H200
    assert ladder.shared_memory(V7, C) <= OPTIN_H200 and ladder.shared_memory(V7, C) >= s.smem
    if s.group > 32:
        assert s.groups <= 15  # one named barrier (ids 1..15) per row group
    assert s.block <= v7_fast.MAX_BLOCK  # one block fits __launch_bounds__(512, 1)


def test_rows_wider_than_a_block_are_split_up_to_65536():
    assert (v7_fast.ROW_MAX_C, v7_fast.MAX_C) == (16384, 65536)
    with pytest.raises(ValueError,
                       match=r"a row of C=16392 is wider than one block holds .* split over a "
                             r"cluster"):
        row_layout(16392)
    with pytest.raises(ValueError,
                       match=r"C=65544 is wider than 4 blocks of 512 threads hold; the largest C "
                             r"is 65536"):
        ladder.shared_memory(V7, 65544)
    assert launch.largest_c(V7, OPTIN_H200, 512) == 65536
    with pytest.raises(ValueError,
                       match=r"at C=16384 a row needs 512 threads of 4 chunks, more than "
                             r"block_size=256; the largest C at this block size is 8192"):
        row_layout(16384, block=256)


WIDE = {  # C: (cluster, chunks a block, threads a block)
    16392: (2, 1025, 288), 32768: (2, 2048, 512), 40000: (4, 1250, 320), 65528: (4, 2048, 512),
        65536: (4, 2048, 512),
}


@pytest.mark.parametrize("C", sorted(WIDE))
@pytest.mark.parametrize("overwrite", [False, True])
def test_wide_plan(C, overwrite):
    cluster, per_rank, block = WIDE[C]
    w = v7_fast.wide_layout(C, overwrite, OPTIN_H200)
    assert (w.cluster, w.per_rank, w.block) == (cluster, per_rank, block)
    # 4 chunks a thread cover it
    assert w.block * v7_fast.MAX_K >= per_rank > (w.block - 32) * v7_fast.MAX_K
    # every block owns some of the row
    assert (cluster - 1) * per_rank < C // 8 <= cluster * per_rank
    assert w.slot == (2 if overwrite else 3) * per_rank * 16
    assert w.stages == min(8, (OPTIN_H200 - 1024) // w.slot) >= 2 and w.shared <= OPTIN_H200 - 1024
    for N in (3, 29, 4096):
        main, reduce = plan(N, C, overwrite=overwrite)
        # the H200 keeps 30 clusters of 4 resident, not 33
        clusters = min(N, {2: 66, 4: 30}[cluster])
        assert main.kernel == f"rmsnorm_backward_v7_wide{cluster}" and main.kernel in V7.kernels
        assert (main.grid, main.block, main.shared) == (clusters * cluster, block, w.shared)
        assert [n for n, _ in main.args] == ["dinp", "partials", "dout", "inp", "weight", "rstd",
                                             "N", "C", "stages",
                                             "overwrite"]
        assert [v for _, v in main.args[6:]] == [N, C, w.stages, int(overwrite)]
        partials = args(main)["partials"]
        # one partial row a cluster
        assert partials.nbytes == clusters * C * 4 and partials.zero == "none"
        assert reduce.kernel == "reduce_dweight_v7" and args(reduce)["partials"] is partials
        assert (args(reduce)["parts"], reduce.block) == (clusters, block)
    both = max(v7_fast.wide_layout(C, m).shared for m in (False, True))
    assert ladder.shared_memory(V7, C) == both


def test_wide_rows_need_sm_90_and_take_no_config():
    a100 = dataclasses.replace(gpu.H200, name="NVIDIA A100", compute_capability=(8, 0),
                               shared_memory_per_block_optin=OPTIN_A100)
    with pytest.raises(ValueError,
                       match=r"C=32768 > 16384 splits each row over a thread-block cluster, "
                             r"which needs sm_90 or newer; NVIDIA A100 is sm_80"):
        plan(64, 32768, device=a100)
    # refused by the config's own check (the ladder's plan) or by the wide plan (the rung's)
    with pytest.raises(ValueError, match=r"Config \(K, prefetch, per_sm, staged\) is for rows one "
                                         r"block holds|wider than one block holds.*K, prefetch"):
        plan(64, 32768, config=Config(K=2))
    with pytest.raises(ValueError, match=r"Config \(K, prefetch, per_sm, staged\) is for rows one "
                                         r"block holds"):
        v7_fast.wide_plan(64, 32768, gpu.H200, config=Config(K=2))
    # the default Config is none
    assert plan(64, 32768, config=Config())[0].kernel == "rmsnorm_backward_v7_wide2"
    # an unknown GPU: every SM holds a block of a cluster
    other = dataclasses.replace(gpu.H200, name="Some sm_90 GPU", multiprocessors=100,
                                resident_clusters=())
    assert plan(4096, 65536, device=other)[0].grid == 100


T4 = dataclasses.replace(gpu.H200, name="Tesla T4", compute_capability=(7, 5), multiprocessors=40,
                         shared_memory_per_block_optin=64 * 1024,
                         shared_memory_per_multiprocessor=64 * 1024,
                         max_threads_per_multiprocessor=1024, resident_clusters=())
A100 = dataclasses.replace(gpu.H200, name="NVIDIA A100", compute_capability=(8, 0),
                           multiprocessors=108, shared_memory_per_block_optin=OPTIN_A100,
                           resident_clusters=())


@pytest.mark.parametrize("C", [1024, 2048, 4096, 8192, 16384])
@pytest.mark.parametrize("overwrite", [False, True])
def test_the_path_follows_the_compute_capability(C, overwrite):
    # cp.async from sm_80: a T4 (sm_75) keeps every row of one block on the register path
    assert plan(4096, C, overwrite=overwrite)[0].kernel == "rmsnorm_backward_v7_staged"
    try:  # an A100 stages the rows whose ring fits its 163 KiB a block
        v7_fast.staged_layout(C, overwrite, OPTIN_A100)
        on_a100 = "rmsnorm_backward_v7_staged"
    except ValueError:
        on_a100 = "rmsnorm_backward_v7"
    assert plan(4096, C, overwrite=overwrite, device=A100)[0].kernel == on_a100
    if C == 16384:  # 64 KiB of dweight and the static shared memory: more than a T4 gives a block
        with pytest.raises(ValueError, match=r"v7_fast at C=16384: a row group's dweight "
                                             r"\(65536 B\) .* 65536 B a block may have on sm_75; "
                                             r"there C <= 16128"):
            plan(4096, C, overwrite=overwrite, device=T4)
        return
    main = plan(4096, C, overwrite=overwrite, device=T4)[0]
    assert main.kernel == "rmsnorm_backward_v7" and main.block <= v7_fast.MAX_BLOCK
    a = args(main)
    assert main.shared <= 64 * 1024 - v7_fast.REGISTER_STATIC_SHARED
    assert main.shared == max(main.block // a["G"] * C * 4, main.block * 16)
    # as many row groups as fit: one more would not
    bigger = row_layout(C, main.block + a["G"], a["K"], overwrite, bool(a["prefetch"]))
    assert (main.block + a["G"] > v7_fast.MAX_BLOCK  # the largest block already
            or bigger.smem > 64 * 1024 - v7_fast.REGISTER_STATIC_SHARED)
    with pytest.raises(ValueError, match=r"Config\(staged=True\) needs .* sm_80 or newer "
                                         r"\(cp.async\); got C=\d+ on sm_75"):
        plan(4096, C, overwrite=overwrite, config=Config(staged=True), device=T4)


def test_wide_rows_only_from_sm_90():
    assert plan(4096, 32768, device=gpu.H200)[0].kernel == "rmsnorm_backward_v7_wide2"
    for device in (T4, A100):
        with pytest.raises(ValueError, match=rf"needs sm_90 or newer; {device.name} is "
                                             rf"{device.arch}"):
            plan(4096, 32768, device=device)


def test_a_t4_plans_fewer_row_groups_where_64_KiB_is_short():
    # overwrite at C=4096: 4 groups of 128 threads want 4 x 16 KiB of dweight; 3 fit a T4's block
    assert row_layout(4096, overwrite=True).groups == 4
    main = plan(70000, 4096, overwrite=True, device=T4)[0]
    assert (main.block, main.shared, args(main)["G"]) == (384, 3 * 4096 * 4, 128)
    assert plan(70000, 4096, overwrite=True, config=Config(staged=False))[0].block == 512


@pytest.mark.parametrize("N,C",
                         [(1, 8), (37, 776), (4096, 16384), (32768, 768), (70000, 1600),
                          (1024, 4096)])
@pytest.mark.parametrize("overwrite", [False, True])
def test_plan_launch(N, C, overwrite):
    # the register path, which rows of 1024 <= C <= 16384 leave by default
    registers = Config(staged=False)
    main, reduce = plan(N, C, overwrite=overwrite, config=registers)
    s = row_layout(C, overwrite=overwrite)
    grid = max(1, min(H200_SMS, ceil_div(N, s.groups)))  # one block per SM
    assert main.kernel == "rmsnorm_backward_v7" == V7.kernels[0]
    assert main.grid == grid and main.block == s.block and main.shared == s.smem
    assert [n for n, _ in main.args] == ["dinp", "partials", "dout", "inp", "weight", "rstd", "N",
                                         "C", "G", "K",
                                         "prefetch", "overwrite"]
    assert [v for _, v in main.args[6:]] == [N, C, s.group, s.K, int(s.prefetch), int(overwrite)]
    partials = args(main)["partials"]
    # C fp32 partials a block, all written by the main kernel before the second reads them: nothing
    # to zero
    assert partials.nbytes == grid * C * 4 and partials.zero == "none"
    passes = ceil_div(C, 128)
    assert reduce.kernel == "reduce_dweight_v7" == V7.kernels[1] and reduce.grid == passes
    assert reduce.block == main.block  # the same block: the same order of every sum
    assert reduce.shared == 0
    assert [n for n, _ in reduce.args] == ["dweight", "partials", "parts", "C", "slices"]
    assert [v for _, v in reduce.args[2:]] == [grid, C, passes]
    assert args(reduce)["partials"] is partials


def test_no_block_waits_for_another():
    # the only wait of the old in-kernel final sum is gone from the source, and nothing can trap but
    # a K the plan never passes or the staged kernel below sm_80, where the plan never stages
    # (results/NOTES.md: beside a kernel holding most SMs, that wait lasted until it ended)
    source = "\n".join(build.kernel_source(f) for f in ("v7_fast", "v7_staged.cuh", "v7_wide.cuh"))
    for gone in ("ld.acquire", "__nanosleep", "globaltimer", "atomicInc", "ticket"):
        assert gone not in source
    assert source.count("__trap()") == 3
    # the wide kernels wait on their own copies (mbarrier) and on their own cluster, which the
    # hardware launches whole; nothing else
    assert source.count("mbarrier.try_wait") == 1 and source.count("barrier.cluster.wait") == 1
    assert source.count("@!done bra WAIT") == 1  # the one spin: on the block's own copies


def test_config_choices():
    s = row_layout(1024, K=2)
    assert (s.K, s.group, s.groups, s.prefetch) == (2, 64, 8, False)
    main = plan(70000, 1024, block_size=256, config=Config(K=2))[0]
    assert main.block == 256 and main.grid == 2 * H200_SMS  # two 256-thread blocks a SM
    assert plan(70000, 1024, block_size=256, config=Config(K=2, per_sm=1))[0].grid == H200_SMS
    # at most what fits
    assert plan(70000, 1024, block_size=256, config=Config(K=2, per_sm=5))[0].grid == 2 * H200_SMS
    assert row_layout(1024, K=1).group == 128
    assert args(plan(5000, 1024, config=Config(K=1))[0])["G"] == 128
    # the defaults are the plan's choices
    assert plan(5000, 1024, config=Config()) == plan(5000, 1024)
    # staged: the default at C = 1024
    assert plan(5000, 1024, config=Config(staged=True)) == plan(5000, 1024)
    with pytest.raises(ValueError,
                       match=r"K, prefetch and per_sm tune the register path; staged=True takes "
                             r"none"):
        Config(K=2, staged=True)
    with pytest.raises(ValueError,
                       match=r"Config\(staged=True\) needs 1024 <= C <= 16384 .*got C=768"):
        plan(5000, 768, config=Config(staged=True))
    with pytest.raises(ValueError, match=r"Config.staged must be True, False or None, got 1"):
        Config(staged=1)
    with pytest.raises(TypeError):
        Config(reduce="fused")  # gone: the partials are always summed by the second kernel
    with pytest.raises(ValueError, match=r"Config.K \(chunks per thread\) must be an int 1..4"):
        Config(K=5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        Config().K = 2


def test_no_environment_variable_selects_a_variant(monkeypatch):
    before = {C: plan(70000, C) for C in (768, 1024, 4096)}
    for name, value in (("RMSNORM_V7_K", "1"), ("RMSNORM_V7_REDUCE", "kernel"),
                        ("RMSNORM_V7_PREFETCH", "0"),
                        ("RMSNORM_V7_PER_SM", "2")):
        monkeypatch.setenv(name, value)
    assert {C: plan(70000, C) for C in (768, 1024, 4096)} == before
    assert row_layout(2048) != row_layout(2048, overwrite=True)  # still prefetching


# the kernel's index arithmetic, mirrored in NumPy: every row once, every chunk once per group,
# every column once in the final sum


def _rows_of(N, grid, groups):
    seen = []
    for block in range(grid):
        for group in range(groups):
            seen += list(range(group * grid + block, N, grid * groups))  # the kernel's row loop
    return seen


def _slices(C, slices):
    quads = C // 4
    per = ceil_div(ceil_div(quads, 32), slices) * 32  # reduce_slice's `per`
    return [(j * per, min(j * per + per, quads)) for j in range(slices)]


@pytest.mark.parametrize("N,C",
                         [(1, 8), (3, 24), (7, 776), (4097, 768), (513, 5120), (4096, 16384),
                          (33333, 1032)])
def test_the_kernels_index_arithmetic_covers_everything_once(N, C):
    main, reduce = plan(N, C, config=Config(staged=False))
    s, grid, reducers = row_layout(C), main.grid, reduce.grid
    assert (args(main)["G"], args(main)["K"]) == (s.group, s.K)
    rows = _rows_of(N, grid, s.groups)
    assert sorted(rows) == list(range(N))
    chunks = C // 8
    owned = sorted(t + j * s.group for t in range(s.group) for j in range(s.K)
                   if t + j * s.group < chunks)
    assert owned == list(range(chunks))
    # the block combine: quad q of the partial row <- float4 (q % 2) * chunks + q // 2 of each
    # group slice
    at = sorted((q % 2) * chunks + q // 2 for q in range(C // 4))
    assert at == list(range(C // 4))
    covered = [q for b, e in _slices(C, reducers) for q in range(b, e)]
    assert covered == list(range(C // 4))


def test_the_kernel_source_matches_the_mirrors():
    # the index expressions the NumPy mirrors above copy, whitespace aside; the mirrors are only as
    # good as this match (the GPU tests check the kernel itself)
    src = " ".join(build.kernel_source("v7_fast").split())
    for pattern in (
        # the row loop: start, step and end
        r"long long row = \(long long\)(p\.)?group \* gridDim\.x \+ blockIdx\.x;",
        r"const long long stride = \(long long\)gridDim\.x \* (p\.)?groups;",
        r"for \(; row < N; row \+= stride\)",
        r"return t \+ j \* G;|const int chunk = t \+ j \* G;",  # a thread's chunks
        r"const int at = \(q % 2\) \* (p\.)?chunks \+ q / 2;",  # the block combine
        # the final sum's slices
        r"const int per = ceil_div\(ceil_div\(quads, QUADS_PER_PASS\), slices\) \* QUADS_PER_PASS;",
    ):
        assert re.search(pattern, src), \
            f"kernels/v7_fast.cu no longer has {pattern!r}: update the mirror"
    assert "atomicAdd" not in src  # no float atomics: deterministic


@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
def test_compiles_without_spills(arch):
    res = build.resources("v7_fast", arch)
    wide = set(v7_fast.WIDE_KERNELS)  # clusters and bulk copies: sm_90 and newer
    assert set(res) == ({"rmsnorm_backward_v7", "reduce_dweight_v7", "rmsnorm_backward_v7_staged"}
                        | (wide if arch == "sm_90" else set()))
    for name, r in res.items():
        assert not r.spills and r.stack_bytes == 0, r
        # __launch_bounds__(512, 1): the registers of 512 threads on one SM, 128 a thread; the
        # staged kernel's (1024, 1): 64
        block = v7_fast.STAGED_BLOCK if name == "rmsnorm_backward_v7_staged" else v7_fast.MAX_BLOCK
        assert r.registers <= 65536 // block
