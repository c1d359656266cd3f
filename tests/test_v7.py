"""v7_fast: the plan's choices and the kernel's index arithmetic (CPU), the overwrite mode and every
launch shape on the GPU, the peers' byte counts and lesson 09's exercise (CPU).

The plan is data (``ladder.plan("v7_fast", ...)`` on ``gpu.H200``); its variants are chosen with
``ladder.v7_fast.Config``, never with globals or environment variables. The version itself is also in every
parametrized test over ``rl.kernels.VERSIONS``.
"""
import ctypes
import dataclasses
import re
import types

import numpy as np

import pytest

from rmsnorm_lessons import bench, bf16, build, check, gpu, kernels, ladder, launch, peers, reference
from rmsnorm_lessons.exercises import lesson09
from rmsnorm_lessons.ladder import ceil_div, v7_fast
from rmsnorm_lessons.ladder.v7_fast import Config, row_layout

H200_SMS = 132
OPTIN_H200 = 232448  # shared memory a block may have on sm_90 after opting in
OPTIN_A100 = 166912
V7 = kernels.get("v7_fast")


def plan(N, C, block_size=None, overwrite=False, config=None, device=gpu.H200):
    return ladder.plan(V7, N, C, device, block_size=block_size, overwrite=overwrite, config=config)


def args(launch_):
    return dict(launch_.args)


# ------------------------------------------------------------------------------------------------------
# the plan (CPU)

EXPECTED = {  # C: (K, G, groups per block, block) in overwrite mode, and accumulate mode outside 1024..8192
    8: (1, 32, 16, 512), 264: (2, 32, 16, 512), 768: (3, 32, 16, 512), 776: (4, 32, 16, 512),
    1024: (4, 32, 16, 512), 1032: (4, 64, 8, 512), 1600: (4, 64, 8, 512), 2048: (4, 64, 8, 512),
    4096: (4, 128, 4, 512), 5120: (4, 160, 3, 480), 8192: (4, 256, 2, 512), 12288: (4, 384, 1, 384),
    16384: (4, 512, 1, 512),
}
EXPECTED_PREFETCH = {  # C: (G, groups, block) in accumulate mode for 1024 <= C <= 8192: K = 2, prefetching
    1024: (64, 8, 512), 1032: (96, 5, 480), 1600: (128, 4, 512), 2048: (128, 4, 512), 4096: (256, 2, 512),
    5120: (320, 1, 320), 8192: (512, 1, 512),
}


@pytest.mark.parametrize("C", sorted(EXPECTED))
@pytest.mark.parametrize("overwrite", [False, True])
def test_plan_picks_K_and_the_row_group_from_C(C, overwrite):
    s = row_layout(C, overwrite=overwrite)
    if overwrite or C not in EXPECTED_PREFETCH:
        assert (s.K, s.group, s.groups, s.block, s.prefetch) == EXPECTED[C] + (False,)
    else:
        assert (s.K, s.group, s.groups, s.block, s.prefetch) == (2,) + EXPECTED_PREFETCH[C] + (True,)
    assert s.prefetch == (not overwrite and 1024 <= C <= 8192)
    assert s.group % 32 == 0 and s.group * s.K * 8 >= C > (s.group - 32) * s.K * 8  # covers the row, no spare warp
    assert s.block == s.groups * s.group <= v7_fast.MAX_BLOCK
    assert s.smem == max(s.groups * C * 4, s.block * 16) <= ladder.shared_memory(V7, C, 512)
    assert ladder.shared_memory(V7, C, 512) == max(row_layout(C, overwrite=m).smem for m in (False, True))
    # the plan launches exactly this layout on the register path (1024 <= C <= 16384 is staged by default)
    main = plan(5000, C, overwrite=overwrite, config=Config(staged=False))[0]
    assert main.kernel == "rmsnorm_backward_v7"
    assert (main.block, main.shared) == (s.block, s.smem)
    assert (args(main)["G"], args(main)["K"], args(main)["prefetch"]) == (s.group, s.K, int(s.prefetch))


def test_prefetch_needs_K_2():
    assert row_layout(2048, prefetch=True).K == 2
    assert not row_layout(2048, K=2).prefetch  # an explicit K alone does not prefetch
    with pytest.raises(ValueError, match=r"prefetch needs K = 2 .*got K=4"):
        row_layout(2048, K=4, prefetch=True)
    assert row_layout(2048, prefetch=False) == row_layout(2048, overwrite=True)
    assert row_layout(768, prefetch=True).prefetch and row_layout(768, overwrite=True, prefetch=True).prefetch
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
    assert s.smem <= 64 * 1024 <= OPTIN_A100 < OPTIN_H200  # the groups' dweight slices: at most 64 KiB
    assert ladder.shared_memory(V7, C) <= OPTIN_H200 and ladder.shared_memory(V7, C) >= s.smem
    if s.group > 32:
        assert s.groups <= 15  # one named barrier (ids 1..15) per row group
    assert s.block <= v7_fast.MAX_BLOCK  # one block fits __launch_bounds__(512, 1)


def test_rows_wider_than_a_block_are_split_up_to_65536():
    assert (v7_fast.ROW_MAX_C, v7_fast.MAX_C) == (16384, 65536)
    with pytest.raises(ValueError, match=r"a row of C=16392 is wider than one block holds .* split over a cluster"):
        row_layout(16392)
    with pytest.raises(ValueError, match=r"C=65544 is wider than 4 blocks of 512 threads hold; the largest C is 65536"):
        ladder.shared_memory(V7, 65544)
    assert launch.largest_c(V7, OPTIN_H200, 512) == 65536
    with pytest.raises(ValueError, match=r"at C=16384 a row needs 512 threads of 4 chunks, more than block_size=256; "
                                         r"the largest C at this block size is 8192"):
        row_layout(16384, block=256)


WIDE = {  # C: (cluster, chunks a block, threads a block)
    16392: (2, 1025, 288), 32768: (2, 2048, 512), 40000: (4, 1250, 320), 65528: (4, 2048, 512), 65536: (4, 2048, 512),
}


@pytest.mark.parametrize("C", sorted(WIDE))
@pytest.mark.parametrize("overwrite", [False, True])
def test_wide_plan(C, overwrite):
    cluster, per_rank, block = WIDE[C]
    w = v7_fast.wide_layout(C, overwrite, OPTIN_H200)
    assert (w.cluster, w.per_rank, w.block) == (cluster, per_rank, block)
    assert w.block * v7_fast.MAX_K >= per_rank > (w.block - 32) * v7_fast.MAX_K  # 4 chunks a thread cover it
    assert (cluster - 1) * per_rank < C // 8 <= cluster * per_rank  # every block owns some of the row
    assert w.slot == (2 if overwrite else 3) * per_rank * 16
    assert w.stages == min(8, (OPTIN_H200 - 1024) // w.slot) >= 2 and w.shared <= OPTIN_H200 - 1024
    for N in (3, 29, 4096):
        main, reduce = plan(N, C, overwrite=overwrite)
        clusters = min(N, {2: 66, 4: 30}[cluster])  # the H200 keeps 30 clusters of 4 resident, not 33
        assert main.kernel == f"rmsnorm_backward_v7_wide{cluster}" and main.kernel in V7.kernels
        assert (main.grid, main.block, main.shared) == (clusters * cluster, block, w.shared)
        assert [n for n, _ in main.args] == ["dinp", "partials", "dout", "inp", "weight", "rstd", "N", "C", "stages",
                                             "overwrite"]
        assert [v for _, v in main.args[6:]] == [N, C, w.stages, int(overwrite)]
        partials = args(main)["partials"]
        assert partials.nbytes == clusters * C * 4 and partials.zero == "none"  # one partial row a cluster
        assert reduce.kernel == "reduce_dweight_v7" and args(reduce)["partials"] is partials
        assert (args(reduce)["parts"], reduce.block) == (clusters, block)
    assert ladder.shared_memory(V7, C) == max(v7_fast.wide_layout(C, m).shared for m in (False, True))


def test_wide_rows_need_sm_90_and_take_no_config():
    a100 = dataclasses.replace(gpu.H200, name="NVIDIA A100", compute_capability=(8, 0),
                               shared_memory_per_block_optin=OPTIN_A100)
    with pytest.raises(ValueError, match=r"C=32768 > 16384 splits each row over a thread-block cluster, which needs "
                                         r"sm_90 or newer; NVIDIA A100 is sm_80"):
        plan(64, 32768, device=a100)
    with pytest.raises(ValueError, match=r"Config \(K, prefetch, per_sm, staged\) is for rows one block holds"):
        plan(64, 32768, config=Config(K=2))
    assert plan(64, 32768, config=Config())[0].kernel == "rmsnorm_backward_v7_wide2"  # the default Config is none
    # an unknown GPU: every SM holds a block of a cluster
    other = dataclasses.replace(gpu.H200, name="Some sm_90 GPU", multiprocessors=100, resident_clusters=())
    assert plan(4096, 65536, device=other)[0].grid == 100


@pytest.mark.parametrize("N,C", [(1, 8), (37, 776), (4096, 16384), (32768, 768), (70000, 1600), (1024, 4096)])
@pytest.mark.parametrize("overwrite", [False, True])
def test_plan_launch(N, C, overwrite):
    registers = Config(staged=False)  # the register path, which rows of 1024 <= C <= 16384 leave by default
    main, reduce = plan(N, C, overwrite=overwrite, config=registers)
    s = row_layout(C, overwrite=overwrite)
    grid = max(1, min(H200_SMS, ceil_div(N, s.groups)))  # one block per SM
    assert main.kernel == "rmsnorm_backward_v7" == V7.kernels[0]
    assert main.grid == grid and main.block == s.block and main.shared == s.smem
    assert [n for n, _ in main.args] == ["dinp", "partials", "dout", "inp", "weight", "rstd", "N", "C", "G", "K",
                                         "prefetch", "overwrite"]
    assert [v for _, v in main.args[6:]] == [N, C, s.group, s.K, int(s.prefetch), int(overwrite)]
    partials = args(main)["partials"]
    # C fp32 partials a block, all written by the main kernel before the second reads them: nothing to zero
    assert partials.nbytes == grid * C * 4 and partials.zero == "none"
    passes = ceil_div(C, 128)
    assert reduce.kernel == "reduce_dweight_v7" == V7.kernels[1] and reduce.grid == passes
    assert reduce.block == main.block  # the same block: the same order of every sum
    assert reduce.shared == 0
    assert [n for n, _ in reduce.args] == ["dweight", "partials", "parts", "C", "slices"]
    assert [v for _, v in reduce.args[2:]] == [grid, C, passes]
    assert args(reduce)["partials"] is partials


def test_no_block_waits_for_another():
    # the only wait of the old in-kernel final sum is gone from the source, and nothing can trap but a K the
    # plan never passes (lab/NOTES.md: beside a kernel holding most SMs, that wait lasted until it ended)
    source = build.kernel_source("v7_fast")
    for gone in ("ld.acquire", "__nanosleep", "globaltimer", "atomicInc", "ticket"):
        assert gone not in source
    assert source.count("__trap()") == 2
    # the wide kernels wait on their own copies (mbarrier) and on their own cluster, which the hardware
    # launches whole; nothing else
    assert source.count("mbarrier.try_wait") == 1 and source.count("barrier.cluster.wait") == 1
    assert source.count("@!done bra WAIT") == 1  # the one spin: on the block's own copies


def test_config_choices():
    s = row_layout(1024, K=2)
    assert (s.K, s.group, s.groups, s.prefetch) == (2, 64, 8, False)
    main = plan(70000, 1024, block_size=256, config=Config(K=2))[0]
    assert main.block == 256 and main.grid == 2 * H200_SMS  # two 256-thread blocks a SM
    assert plan(70000, 1024, block_size=256, config=Config(K=2, per_sm=1))[0].grid == H200_SMS
    assert plan(70000, 1024, block_size=256, config=Config(K=2, per_sm=5))[0].grid == 2 * H200_SMS  # at most what fits
    assert row_layout(1024, K=1).group == 128
    assert args(plan(5000, 1024, config=Config(K=1))[0])["G"] == 128
    assert plan(5000, 1024, config=Config()) == plan(5000, 1024)  # the defaults are the plan's choices
    assert plan(5000, 1024, config=Config(staged=True)) == plan(5000, 1024)  # staged: the default at C = 1024
    with pytest.raises(ValueError, match=r"K, prefetch and per_sm tune the register path; staged=True takes none"):
        Config(K=2, staged=True)
    with pytest.raises(ValueError, match=r"Config\(staged=True\) needs 1024 <= C <= 16384 .*got C=768"):
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
    for name, value in (("RMSNORM_V7_K", "1"), ("RMSNORM_V7_REDUCE", "kernel"), ("RMSNORM_V7_PREFETCH", "0"),
                        ("RMSNORM_V7_PER_SM", "2")):
        monkeypatch.setenv(name, value)
    assert {C: plan(70000, C) for C in (768, 1024, 4096)} == before
    assert row_layout(2048) != row_layout(2048, overwrite=True)  # still prefetching


# the kernel's index arithmetic, mirrored in NumPy: every row once, every chunk once per group, every
# column once in the final sum


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


@pytest.mark.parametrize("N,C", [(1, 8), (3, 24), (7, 776), (4097, 768), (513, 5120), (4096, 16384), (33333, 1032)])
def test_the_kernels_index_arithmetic_covers_everything_once(N, C):
    main, reduce = plan(N, C, config=Config(staged=False))
    s, grid, reducers = row_layout(C), main.grid, reduce.grid
    assert (args(main)["G"], args(main)["K"]) == (s.group, s.K)
    rows = _rows_of(N, grid, s.groups)
    assert sorted(rows) == list(range(N))
    chunks = C // 8
    owned = sorted(t + j * s.group for t in range(s.group) for j in range(s.K) if t + j * s.group < chunks)
    assert owned == list(range(chunks))
    # the block combine: quad q of the partial row <- float4 (q % 2) * chunks + q // 2 of each group slice
    at = sorted((q % 2) * chunks + q // 2 for q in range(C // 4))
    assert at == list(range(C // 4))
    covered = [q for b, e in _slices(C, reducers) for q in range(b, e)]
    assert covered == list(range(C // 4))


def test_the_kernel_source_matches_the_mirrors():
    # the index expressions the NumPy mirrors above copy, whitespace aside; the mirrors are only as good as
    # this match (the GPU tests check the kernel itself)
    src = " ".join(build.kernel_source("v7_fast").split())
    for pattern in (
        r"long long row = \(long long\)(p\.)?group \* gridDim\.x \+ blockIdx\.x;",  # the row loop: start,
        r"const long long stride = \(long long\)gridDim\.x \* (p\.)?groups;",  # step,
        r"for \(; row < N; row \+= stride\)",  # and end
        r"return t \+ j \* G;|const int chunk = t \+ j \* G;",  # a thread's chunks
        r"const int at = \(q % 2\) \* (p\.)?chunks \+ q / 2;",  # the block combine
        r"const int per = ceil_div\(ceil_div\(quads, QUADS_PER_PASS\), slices\) \* QUADS_PER_PASS;",  # slices
    ):
        assert re.search(pattern, src), f"kernels/v7_fast.cu no longer has {pattern!r}: update the mirror"
    assert "atomicAdd" not in src  # no float atomics: deterministic


@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
def test_compiles_without_spills(arch):
    res = build.resources("v7_fast", arch)
    wide = set(v7_fast.WIDE_KERNELS)  # clusters and bulk copies: sm_90 and newer
    assert set(res) == ({"rmsnorm_backward_v7", "reduce_dweight_v7", "rmsnorm_backward_v7_staged"}
                        | (wide if arch == "sm_90" else set()))
    for name, r in res.items():
        assert not r.spills and r.stack_bytes == 0, r
        # __launch_bounds__(512, 1): the registers of 512 threads on one SM, 128 a thread; the staged
        # kernel's (1024, 1): 64
        block = v7_fast.STAGED_BLOCK if name == "rmsnorm_backward_v7_staged" else v7_fast.MAX_BLOCK
        assert r.registers <= 65536 // block


# ------------------------------------------------------------------------------------------------------
# bench rows and peers (CPU)


def test_peer_bytes():
    N, C = 8192, 768
    assert peers.bytes_moved(N, C) == 3 * N * C * 2 + 4 * N + 2 * C * 2
    # the same row tensors as v7 in overwrite mode; v7 also reads dweight (it accumulates)
    assert V7.bytes_moved(N, C, overwrite=True) - peers.bytes_moved(N, C) == C * 2
    assert V7.bytes_moved(N, C) - peers.bytes_moved(N, C) == N * C * 2 + C * 2
    assert peers.bytes_moved(0, C) == 2 * C * 2


def test_peers_say_why_they_cannot_run(monkeypatch):
    import builtins

    real = builtins.__import__

    def no_torch(name, *a, **kw):
        if name == "torch" or name.startswith("torch.") or name.startswith("liger_kernel"):
            raise ImportError(f"No module named {name!r}")
        return real(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", no_torch)
    for name in peers.ALL_PEERS:  # the default three and the opt-in ones (Quack, max-autotune)
        assert peers.why_unavailable(name) == "PyTorch is not installed"
    assert peers.available() == []
    with pytest.raises(ValueError, match="peer must be one of"):
        peers.why_unavailable("cuDNN")


def test_quack_peers_say_when_quack_is_missing(monkeypatch):
    # PyTorch with a GPU, no quack-kernels: the three Quack peers say so; the others are unaffected
    fake_torch = types.SimpleNamespace(cuda=types.SimpleNamespace(is_available=lambda: True), compile=object(),
                                       __version__="0.0")
    monkeypatch.setattr(peers, "_torch", lambda: fake_torch)
    monkeypatch.setattr(peers, "_liger", lambda: None)

    def no_quack():
        raise ImportError("No module named 'quack'")

    monkeypatch.setattr(peers, "_quack", no_quack)
    for name in ("Quack", "Quack kernel", "Quack tuned"):
        assert peers.why_unavailable(name) == "Quack (quack-kernels) is not installed (No module named 'quack')"
    for name in ("torch eager", "torch.compile", "torch.compile max-autotune", "Liger-Kernel"):
        assert peers.why_unavailable(name) is None
    assert peers.available() == list(peers.PEERS)  # the default sweep: the three


def _t(name, N, C, ms, nbytes=10**9, copy=4000.0):
    return bench._timing(name, N, C, [ms] * 5, nbytes, copy)


def test_records_by_shape_and_against():
    rows = [_t("v6_last_block", 8, 8, 2.0), _t("v7_fast", 8, 8, 1.0), _t("v6_last_block", 16, 8, 4.0),
            _t("torch eager", 8, 8, 3.0), _t("v7_fast (dinp=)", 8, 8, 0.8), _t("Liger-Kernel", 8, 8, 0.5)]
    recs = bench.records(rows)
    assert [r["speedup_over_v6"] for r in recs] == [1.0, 2.0, 1.0, 2.0 / 3.0, 2.5, 4.0]
    assert recs[1]["percent_of_copy"] == pytest.approx(100 * (1e9 / 1e-3 / 1e9) / 4000)
    assert {"name", "N", "C", "ms", "gbps", "percent_of_copy", "speedup_over_v6"} <= set(recs[0])
    assert [(r.name, r.N) for r in bench.by_shape(rows)][:3] == [("v6_last_block", 8), ("v7_fast", 8),
                                                                  ("torch eager", 8)]
    text = bench.against(rows, "v7_fast (dinp=)", peers.PEERS)
    assert "vs Liger-Kernel 0.5000 ms: 0.62x (SLOWER)" in text
    assert bench.overwrite_name("v7_fast") == "v7_fast (dinp=)"


# ------------------------------------------------------------------------------------------------------
# lesson 09's exercise (CPU): the right answer passes, wrong ones are reported (lesson 08's floor
# time: tests/test_lesson08.py)


def test_lesson09_partials_fraction(monkeypatch):
    right = lesson09.partials_fraction(4096, 16384, 132)
    assert right == pytest.approx(2 * 132 * 16384 * 4 / V7.bytes_moved(4096, 16384))
    assert lesson09.check_partials_fraction(right, grid=132)
    for wrong, says in [(None, "replace None"), (100 * right, "percentage"), (right / 2, "half"),
                        (2 * right, "twice"), (0.5, "is off")]:
        v = lesson09.check_partials_fraction(wrong, grid=132)
        assert not v.passed and says in v.message, (wrong, v.message)
    # by default, the grid v7_fast's plan launches on this GPU, or on the H200 (132 blocks at this shape)
    monkeypatch.setattr(gpu, "facts_or_fallback", lambda: (gpu.H200, "saved"))
    assert plan(4096, 16384)[0].grid == 132
    assert lesson09.check_partials_fraction(right)
    small = dataclasses.replace(gpu.H200, multiprocessors=66)
    monkeypatch.setattr(gpu, "facts_or_fallback", lambda: (small, "a smaller GPU"))
    assert lesson09.check_partials_fraction(lesson09.partials_fraction(4096, 16384, 66))


# ------------------------------------------------------------------------------------------------------
# on the GPU


def _gradient(p, overwrite):
    return reference.backward(p["dout"], p["inp"], p["weight"], p["rstd"], None if overwrite else p["dinp"],
                              p["dweight"])


def _ok(N, got, want):
    report = check.compare_outputs(V7, N, got, want, name="v7_fast")
    assert report.ok, str(report)


@pytest.mark.gpu
@pytest.mark.parametrize("N,C", [(1, 8), (7, 776), (1031, 1024), (129, 1600), (513, 5120), (65, 16384)])
def test_overwrite_mode_sets_dinp_and_adds_dweight(N, C):
    p = reference.random_problem(N, C, bf16.bfloat16, seed=N + C, accumulate=True)
    poisoned = np.full((N, C), np.nan, np.float32).astype(bf16.bfloat16)  # never read in this mode
    got = kernels.run(V7, p["dout"], p["inp"], p["weight"], p["rstd"], poisoned, p["dweight"], overwrite=True)
    assert np.isfinite(np.asarray(got[0], np.float32)).all()
    _ok(N, got, _gradient(p, overwrite=True))
    # again, from its own outputs: dinp is the same gradient (bitwise), dweight took a second one
    again = kernels.run(V7, p["dout"], p["inp"], p["weight"], p["rstd"], got[0], got[1], overwrite=True)
    assert np.array_equal(bf16.bits(again[0]), bf16.bits(got[0]))
    _, grad_w = reference.backward(p["dout"], p["inp"], p["weight"], p["rstd"])
    want_w = p["dweight"].astype(np.float64) + 2 * grad_w
    tol = check.tolerances(bf16.bfloat16, N)
    assert check.compare(again[1], want_w, 2 * tol["dweight"][0], tol["dweight"][1], name="dweight").ok


@pytest.mark.gpu
@pytest.mark.parametrize("C", [8, 264, 768, 1600, 4096, 5120, 8192, 16384])
@pytest.mark.parametrize("overwrite", [False, True])
def test_every_launch_shape_against_the_reference(C, overwrite):
    N = max(3, min(4099, (1 << 23) // C) | 1)  # odd; N*C up to 8 M
    p = reference.random_problem(N, C, bf16.bfloat16, seed=C * 3 + overwrite, accumulate=True)
    want = _gradient(p, overwrite)
    got = kernels.run(V7, p["dout"], p["inp"], p["weight"], p["rstd"], p["dinp"], p["dweight"], overwrite=overwrite)
    _ok(N, got, want)
    main = launch.launcher(V7, C, overwrite=overwrite).plan(N)[0]  # the launcher run() used
    staged = v7_fast.STAGED_C[0] <= C <= v7_fast.STAGED_C[1]
    if staged:  # the default: rows staged by cp.async, in the layout staged_layout gives this device
        t = v7_fast.staged_layout(C, overwrite, gpu.facts().shared_memory_per_block_optin)
        assert main.kernel == "rmsnorm_backward_v7_staged"
        assert (args(main)["G"], args(main)["stages"], main.block, main.shared) == (t.group, t.stages, t.block, t.shared)
        # and the register path at the same C, which Config(staged=False) asks for
        registers = v7_fast.Config(staged=False)
        _ok(N, kernels.run(V7, p["dout"], p["inp"], p["weight"], p["rstd"], p["dinp"], p["dweight"],
                           overwrite=overwrite, config=registers), want)
        main = launch.launcher(V7, C, overwrite=overwrite, config=registers).plan(N)[0]
    s = row_layout(C, overwrite=overwrite)  # the register path ran the layout this file expects
    assert main.kernel == "rmsnorm_backward_v7"
    assert (args(main)["G"], args(main)["K"], args(main)["prefetch"]) == (s.group, s.K, int(s.prefetch))
    assert s.prefetch == (not overwrite and 1024 <= C <= 8192)
    assert main.block == s.block and main.shared == s.smem <= ladder.shared_memory(V7, C)


def _run(p, config=None, block=None):
    """One call from ``p``'s inputs and outputs, with a variant; returns (dinp, dweight) as NumPy arrays."""
    return kernels.run(V7, p["dout"], p["inp"], p["weight"], p["rstd"], p["dinp"], p["dweight"], config=config,
                       block_size=block)


@pytest.mark.gpu
@pytest.mark.parametrize("variant", [dict(K=1), dict(K=2), dict(K=3), dict(K=4), dict(block=256),
                                     dict(block=128), dict(block=256, per_sm=1), dict(prefetch=False),
                                     dict(prefetch=True, block=256), dict(K=2, per_sm=1)],
                         ids=lambda v: ",".join(f"{k}={x}" for k, x in v.items()))
def test_launch_variants_are_right(variant):
    N, C = 2053, 1024
    p = reference.random_problem(N, C, bf16.bfloat16, seed=77, accumulate=True)
    variant = dict(variant)
    block = variant.pop("block", None)
    config = Config(**variant)
    main = launch.launcher(V7, C, block_size=block, config=config).plan(N)[0]
    assert main.block <= (block or 512)
    if "K" in variant:
        assert args(main)["K"] == variant["K"]
    if "prefetch" in variant:
        assert args(main)["prefetch"] == int(variant["prefetch"])
    _ok(N, _run(p, config, block), _gradient(p, False))


@pytest.mark.gpu
def test_C_beyond_65536_refused_before_launching():
    p = reference.random_problem(2, 65544, bf16.bfloat16, seed=1)
    with pytest.raises(ValueError, match=r"the largest C is 65536"):
        kernels.run(V7, p["dout"], p["inp"], p["weight"], p["rstd"])


@pytest.mark.gpu
@pytest.mark.parametrize("N,C", [(67, 16392), (40, 32768), (5, 40000), (33, 65536), (21, 65528), (1, 65536)])
@pytest.mark.parametrize("overwrite", [False, True])
def test_wide_rows_against_the_reference_bitwise_twice(N, C, overwrite):
    p = reference.random_problem(N, C, bf16.bfloat16, seed=N + C, accumulate=True)
    report = check.check_version(V7, N, C, seed=N + C + 3, overwrite=overwrite)
    assert report.ok, report
    runs = [kernels.run(V7, p["dout"], p["inp"], p["weight"], p["rstd"], p["dinp"], p["dweight"],
                        overwrite=overwrite) for _ in range(2)]
    for a, b in zip(*runs):
        assert np.array_equal(bf16.bits(a), bf16.bits(b))


class _LaunchConfig(ctypes.Structure):  # CUlaunchConfig
    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p), ("attrs", ctypes.c_void_p),
                ("numAttrs", ctypes.c_uint)]


@pytest.mark.gpu
@pytest.mark.parametrize("cluster", v7_fast.WIDE_CLUSTERS)
def test_the_saved_resident_clusters_are_what_the_driver_says(cluster):
    """The plan's figure (gpu.H200.resident_clusters) against cuOccupancyMaxActiveClusters on this GPU, for
    v7's own wide kernel (loaded again through the driver API: PyCUDA's Function hides its handle)."""
    f = gpu.facts()
    if f.name != gpu.H200.name:
        pytest.skip(f"the saved figures are the H200's; this is {f.name}")
    lib = ctypes.CDLL("libcuda.so.1")
    cubin = build.compile_file("v7_fast", f.arch).binary
    module, function, count = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_int(0)
    with gpu.in_context():
        assert lib.cuModuleLoadData(ctypes.byref(module), ctypes.c_char_p(cubin)) == 0
        try:
            name = f"rmsnorm_backward_v7_wide{cluster}".encode()
            assert lib.cuModuleGetFunction(ctypes.byref(function), module, name) == 0
            w = v7_fast.wide_layout(cluster * 16384, False, f.shared_memory_per_block_optin)
            assert lib.cuFuncSetAttribute(function, 8, ctypes.c_int(w.shared)) == 0  # MAX_DYNAMIC_SHARED_SIZE_BYTES
            config = _LaunchConfig(cluster * f.multiprocessors, 1, 1, w.block, 1, 1, w.shared, None, None, 0)
            assert lib.cuOccupancyMaxActiveClusters(ctypes.byref(count), function, ctypes.byref(config)) == 0
        finally:
            lib.cuModuleUnload(module)
    print(f"clusters of {cluster}: the driver runs {count.value} at once")
    assert dict(f.resident_clusters)[cluster] == count.value


def test_bench_command_writes_every_row(tmp_path, monkeypatch):
    """``bench --peers --json --plot`` with the GPU parts replaced by fakes: rows, JSON and picture."""
    import json

    from rmsnorm_lessons import cli, gpu

    shapes = [(8192, 768), (1024, 4096)]
    calls = {}

    def fake_sweep(versions, shapes_, repeats=50, check=True, copy_gbps=None, overwrite=False, ceiling=False):
        calls["sweep"] = (versions, shapes_, overwrite, ceiling)
        out = []
        for N, C in shapes_:
            out += [_t("v6_last_block", N, C, 2.0, copy=copy_gbps), _t("v7_fast", N, C, 1.0, copy=copy_gbps)]
            if overwrite:
                out.append(_t("v7_fast (dinp=)", N, C, 0.8, copy=copy_gbps))
        if ceiling:
            for N, C in shapes_:
                out.append(_t(bench.STREAM_NAME, N, C, 0.9, copy=copy_gbps))
                if overwrite:
                    out.append(_t(bench.STREAM_NAME + " (dinp=)", N, C, 0.6, copy=copy_gbps))
        return out

    def fake_peers(shapes_, names=None, repeats=50, copy_gbps=None, log=None, wall_times=False):
        calls["wall_times"] = wall_times
        return [_t(name, N, C, 3.0, copy=copy_gbps) for N, C in shapes_ for name in peers.PEERS]

    monkeypatch.setattr(gpu, "require", lambda: None)
    monkeypatch.setattr(bench, "copy_yardstick", lambda: bench.Yardstick(3900.0, 4000.0))
    monkeypatch.setattr(bench, "sweep", fake_sweep)
    monkeypatch.setattr(peers, "sweep", fake_peers)
    out_json, out_png = tmp_path / "bench.json", tmp_path / "bench.png"
    rc = cli.main(["bench", "v6_last_block", "v7_fast", "--shapes", "8192x768,1024x4096", "--peers",
                   "--json", str(out_json), "--plot", str(out_png)])
    assert rc == 0
    # overwrite rows follow --peers; the same-bytes ceiling is on by default
    assert calls["sweep"] == (["v6_last_block", "v7_fast"], shapes, True, True)
    assert calls["wall_times"]  # the shell's bench says what each peer cost: some compile for minutes
    rows = json.loads(out_json.read_text())
    assert len(rows) == 2 * 8
    assert [r["name"] for r in rows[:8]] == ["v6_last_block", "v7_fast", "v7_fast (dinp=)", bench.STREAM_NAME,
                                             bench.STREAM_NAME + " (dinp=)", *peers.PEERS]
    for r in rows:
        assert {"name", "N", "C", "ms", "gbps", "percent_of_copy", "percent_of_ceiling", "noisy",
                "speedup_over_v6"} <= set(r)
    assert rows[2]["speedup_over_v6"] == pytest.approx(2.5)
    assert rows[1]["percent_of_ceiling"] == pytest.approx(90.0)  # accumulate mode against its ceiling
    assert rows[2]["percent_of_ceiling"] == pytest.approx(75.0)  # dinp= against the overwrite ceiling
    assert rows[5]["percent_of_ceiling"] == pytest.approx(20.0)  # a peer (dinp=): 0.6 ms over 3.0 ms
    assert out_png.stat().st_size > 1000
    rc = cli.main(["bench", "v7_fast", "--shapes", "8192x768", "--no-peers", "--no-ceiling"])
    assert rc == 0 and calls["sweep"][2:] == (False, False)


# ------------------------------------------------------------------------------------------------------
# the streaming ceiling and the fixed-cost fit (lab/v7_explore.py, lab/v7_fixed_cost.py, lesson 08)


def test_fit_fixed_cost_recovers_a_line():
    ns = [1024, 4096, 8192, 16384]
    ms = [(6.5 + 8.25e-3 * n) / 1e3 for n in ns]  # 6.5 us + 8.25 ns per row
    fixed, per_row = bench.fit_fixed_cost(ns, ms)
    assert fixed == pytest.approx(6.5) and per_row == pytest.approx(8.25)
    with pytest.raises(ValueError, match="at least two different N"):
        bench.fit_fixed_cost([4096, 4096], [0.01, 0.011])


def test_fixed_cost_plot():
    from rmsnorm_lessons import plots

    fig = plots.fixed_cost({"v7_fast": [(1024, 0.017), (16384, 0.142)], bench.STREAM_NAME: [(1024, 0.012), (16384, 0.132)]},
                           C=4096)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert labels[0].startswith("v7_fast: 8.7 us + 8.14 ns/row"), labels


def test_stream_elementwise_refuses_a_partial_chunk():
    with pytest.raises(ValueError, match=r"n \(bf16 elements\) must be a multiple of 8"):
        bench.stream_elementwise(0, 0, 0, 12)


def test_stream_kernel_compiles_lean():
    res = build.resources("stream_ceiling", "sm_90")["stream_elementwise"]
    assert not res.spills and res.registers <= 32  # 2048 threads per SM: 8 blocks of 256


@pytest.mark.gpu
@pytest.mark.parametrize("accumulate", [True, False])
def test_stream_kernel_computes_what_it_says(accumulate):
    import rmsnorm_lessons as rl

    drv = rl.gpu.driver()
    n = 3 * 1000 * 8 + 8 * 7  # not a multiple of the grid's threads
    rng = np.random.default_rng(3)
    a, b, c = (bf16.to_bf16(rng.standard_normal(n)) for _ in range(3))
    dev = [drv.to_device(np.ascontiguousarray(x).view(np.uint16)) for x in (c, a, b)]
    bench.stream_elementwise(dev[0], dev[1], dev[2], n, accumulate=accumulate)
    got = np.empty(n, np.uint16)
    drv.memcpy_dtoh(got, dev[0])
    for d in dev:
        d.free()
    # a * b is exact in fp32 (8-bit mantissas), so fused or not the sum rounds once, then once to bf16
    want = bf16.from_bf16(a) * bf16.from_bf16(b) + (bf16.from_bf16(c) if accumulate else np.float32(0))
    assert np.array_equal(got, bf16.bits(bf16.to_bf16(want)))


@pytest.mark.gpu
def test_stream_ceiling_counts_v7s_bytes():
    import rmsnorm_lessons as rl

    t = bench.stream_ceiling(1024, 4096, copy_gbps=4000.0, overwrite=True, repeats=5)
    assert t.name == bench.STREAM_NAME + " (dinp=)" and t.bytes == V7.bytes_moved(1024, 4096, overwrite=True)
    assert 0 < t.ms < 10 and t.gbps == pytest.approx(t.bytes / (t.ms * 1e-3) / 1e9)
    assert rl.gpu.available()
