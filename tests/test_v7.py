"""v7_fast: the plan's choices and the kernel's index arithmetic (CPU), the overwrite mode and every
launch shape on the GPU, the peers' byte counts and lesson 08's exercises (CPU).

The version itself is also in every parametrized test over ``rl.kernels.VERSIONS``.
"""
import re
from types import SimpleNamespace

import numpy as np
import pytest

from rmsnorm_lessons import bench, bf16, build, check, kernels, peers, reference
from rmsnorm_lessons.exercises import lesson08
from rmsnorm_lessons.kernels import ceil_div

H200_SMS = 132
OPTIN_H200 = 232448  # shared memory a block may have on sm_90 after opting in
OPTIN_A100 = 166912
V7 = kernels.get("v7_fast")


class FakeLauncher:
    """What a plan sees of a Launcher; records launches instead of making them."""

    def __init__(self, N, C, block_size=None, overwrite=False, multiprocessors=H200_SMS):
        self.spec = V7
        self.N, self.C = N, C
        self.block_size = block_size or V7.block_size
        self.multiprocessors = multiprocessors
        self.overwrite = overwrite
        self.smem = V7.dynamic_smem(C, self.block_size)
        self.launches = []
        self.scratches = {}

    def scratch(self, name, nbytes, zero=False):
        self.scratches.setdefault(name, (nbytes, zero))
        return np.uintp(0x7000_0000_0000)

    def call(self, kernel, grid, stream, *args, block=None):
        self.launches.append(SimpleNamespace(kernel=kernel, grid=tuple(grid), block=block or self.block_size,
                                             args=args))


def plan(N, C, **kw):
    L = FakeLauncher(N, C, **kw)
    V7.plan(L, kernels.Buffers(1, 2, 3, 4, 5, 6), None)
    return L


@pytest.fixture
def tuning():
    """kernels.V7_TUNING, emptied again afterwards."""
    kernels.V7_TUNING.clear()
    yield kernels.V7_TUNING
    kernels.V7_TUNING.clear()


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
    s = kernels.v7_shape(C, overwrite=overwrite)
    if overwrite or C not in EXPECTED_PREFETCH:
        assert (s.K, s.group, s.groups, s.block, s.prefetch) == EXPECTED[C] + (False,)
    else:
        assert (s.K, s.group, s.groups, s.block, s.prefetch) == (2,) + EXPECTED_PREFETCH[C] + (True,)
    assert s.prefetch == (not overwrite and 1024 <= C <= 8192)
    assert s.group % 32 == 0 and s.group * s.K * 8 >= C > (s.group - 32) * s.K * 8  # covers the row, no spare warp
    assert s.block == s.groups * s.group <= kernels.V7_MAX_BLOCK
    assert s.smem == max(s.groups * C * 4, s.block * 16) <= V7.dynamic_smem(C, 512)
    assert V7.dynamic_smem(C, 512) == max(kernels.v7_shape(C, overwrite=m).smem for m in (False, True))


def test_prefetch_needs_K_2(tuning):
    assert kernels.v7_shape(2048, prefetch=True).K == 2
    assert not kernels.v7_shape(2048, K=2).prefetch  # an explicit K alone does not prefetch
    with pytest.raises(ValueError, match=r"prefetch needs K = 2 .*got K=4"):
        kernels.v7_shape(2048, K=4, prefetch=True)
    tuning["prefetch"] = 0
    assert kernels.v7_shape(2048) == kernels.v7_shape(2048, overwrite=True)
    tuning["prefetch"] = 1
    assert kernels.v7_shape(768).prefetch and kernels.v7_shape(768, overwrite=True).prefetch


@pytest.mark.parametrize("C", list(range(8, 16385, 8 * 97)) + [16384])
@pytest.mark.parametrize("overwrite", [False, True])
def test_every_C_fits_the_shared_memory_and_the_barriers(C, overwrite):
    s = kernels.v7_shape(C, overwrite=overwrite)
    assert s.smem <= 64 * 1024 <= OPTIN_A100 < OPTIN_H200  # the groups' dweight slices: at most 64 KiB
    assert kernels.check_shared_memory(V7, C, OPTIN_H200) == V7.dynamic_smem(C, 512) >= s.smem
    if s.group > 32:
        assert s.groups <= 15  # one named barrier (ids 1..15) per row group
    assert 65536 // (kernels.V7_REGISTERS * s.block) >= 1  # one block of 128-register threads fits


def test_C_above_16384_is_refused_with_the_largest_C():
    assert kernels.V7_MAX_C == 16384
    with pytest.raises(ValueError, match=r"the largest C is 16384"):
        kernels.v7_shape(16392)
    with pytest.raises(ValueError, match=r"^C=16392 is more than v7_fast can run on any device; the largest C "
                                         r"it can run is 16384$"):
        kernels.check_shared_memory(V7, 16392, OPTIN_H200)
    with pytest.raises(ValueError, match=r"a row needs 512 threads, more than a block of 256"):
        kernels.v7_shape(16384, block=256)


@pytest.mark.parametrize("N,C", [(1, 8), (37, 776), (4096, 16384), (32768, 768), (70000, 1600), (1024, 4096)])
@pytest.mark.parametrize("overwrite", [False, True])
def test_plan_launch(N, C, overwrite):
    L = plan(N, C, overwrite=overwrite)
    s = kernels.v7_shape(C, overwrite=overwrite)
    assert len(L.launches) == 1
    launch = L.launches[0]
    grid = max(1, min(H200_SMS, ceil_div(N, s.groups)))  # one block per SM
    assert launch.kernel == "rmsnorm_backward_v7" == V7.kernels[0]
    assert launch.grid == (grid,) and launch.block == s.block
    passes = ceil_div(C, 128)
    reducers = min(passes, max(1, grid // 2))
    assert launch.args[7:] == (N, C, s.group, s.K, int(s.prefetch), int(overwrite), reducers)
    assert 1 <= reducers <= max(1, grid // 2)  # at most half the grid waits: the others can always start
    nbytes, zero = L.scratches["scratch"]
    assert nbytes == (32 + grid * C) * 4 and zero  # the ticket counter's line, then C partials a block


def test_plan_with_a_reduce_kernel(tuning):
    tuning["reduce"] = "kernel"
    L = plan(70000, 4096)
    main, reduce = L.launches
    assert main.args[-1] == 0  # no fused reduction
    passes = 4096 // 128
    assert reduce.kernel == "reduce_dweight_v7" and reduce.grid == (passes,)
    assert reduce.block == main.block  # the same block: the same order of every sum
    assert reduce.args[2:] == (H200_SMS, 4096, passes)


def test_tuning_hook_and_environment(tuning, monkeypatch):
    tuning["K"] = 2
    s = kernels.v7_shape(1024)
    assert (s.K, s.group, s.groups, s.prefetch) == (2, 64, 8, False)
    L = plan(70000, 1024, block_size=256)
    assert L.launches[0].block == 256 and L.launches[0].grid == (2 * H200_SMS,)  # two 256-thread blocks a SM
    tuning["per_sm"] = 1
    assert plan(70000, 1024, block_size=256).launches[0].grid == (H200_SMS,)
    tuning.clear()
    monkeypatch.setenv("RMSNORM_V7_K", "1")
    assert kernels.v7_shape(1024).group == 128
    monkeypatch.setenv("RMSNORM_V7_REDUCE", "kernel")
    assert len(plan(5000, 1024).launches) == 2
    monkeypatch.setenv("RMSNORM_V7_REDUCE", "sideways")
    with pytest.raises(ValueError, match="reduce must be 'fused' or 'kernel'"):
        plan(5000, 1024)
    monkeypatch.delenv("RMSNORM_V7_REDUCE")
    monkeypatch.setenv("RMSNORM_V7_PREFETCH", "0")
    assert kernels.v7_shape(2048) == kernels.v7_shape(2048, overwrite=True)
    monkeypatch.setenv("RMSNORM_V7_K", "5")
    with pytest.raises(ValueError, match=r"K \(chunks per thread\) must be 1..4"):
        kernels.v7_shape(1024)


def test_tuning_changed_after_the_launcher_was_made(tuning):
    L = FakeLauncher(5000, 1024)  # prepared for K = 4 (overwrite mode): 16 groups, 64 KiB
    tuning["K"] = 1  # 4 groups of 128 threads: 16 KiB, fits
    V7.plan(L, kernels.Buffers(1, 2, 3, 4, 5, 6), None)
    L = FakeLauncher(5000, 8)  # prepared for 8 KiB
    tuning["K"] = 4
    L.smem = 4  # as if it had been prepared for less
    with pytest.raises(RuntimeError, match="the tuning changed after this launcher was made"):
        V7.plan(L, kernels.Buffers(1, 2, 3, 4, 5, 6), None)


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
    L = plan(N, C)
    launch = L.launches[0]
    s, grid, reducers = kernels.v7_shape(C), launch.grid[0], launch.args[-1]
    assert launch.args[9:11] == (s.group, s.K)
    rows = _rows_of(N, grid, s.groups)
    assert sorted(rows) == list(range(N))
    chunks = C // 8
    owned = sorted(t + j * s.group for t in range(s.group) for j in range(s.K) if t + j * s.group < chunks)
    assert owned == list(range(chunks))
    # the block combine: quad q of the partial row <- float4 (q % 2) * chunks + q // 2 of each group slice
    at = sorted((q % 2) * chunks + q // 2 for q in range(C // 4))
    assert at == list(range(C // 4))
    for slices in {reducers, ceil_div(C, 128)}:  # fused and kernel mode
        covered = [q for b, e in _slices(C, slices) for q in range(b, e)]
        assert covered == list(range(C // 4))


def test_the_kernel_source_matches_the_mirrors():
    src = build.kernel_source("v7_fast")
    assert "long long row = (long long)group * gridDim.x + blockIdx.x;" in src
    assert "for (; row < N; row += stride)" in src
    assert "if (PREFETCH && row + stride < N) load_row(row + stride, gn, xn, rn);" in src
    assert "const long long stride = (long long)gridDim.x * groups;" in src
    assert "const int chunk = t + j * G;" in src
    assert "const int at = (q % 2) * chunks + q / 2;" in src
    assert "const int per = ceil_div(ceil_div(quads, QUADS_PER_PASS), slices) * QUADS_PER_PASS;" in src
    assert re.search(r"constexpr int QUADS_PER_PASS = WARP_SIZE;", src)
    assert "atomicInc(counter, gridDim.x - 1)" in src
    assert "atomicAdd" not in src  # no float atomics: deterministic


@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
def test_compiles_without_spills(arch):
    res = build.resources("v7_fast", arch)
    assert set(res) == {"rmsnorm_backward_v7", "reduce_dweight_v7"}
    for r in res.values():
        assert not r.spills and r.stack_bytes == 0, r
    assert res["rmsnorm_backward_v7"].registers <= kernels.V7_REGISTERS


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
    for name in peers.PEERS:
        assert peers.why_unavailable(name) == "PyTorch is not installed"
    assert peers.available() == []
    with pytest.raises(ValueError, match="peer must be one of"):
        peers.why_unavailable("cuDNN")


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
# lesson 08's exercises (CPU): the right answer passes, wrong ones are reported


def test_lesson08_floor_time():
    right = lesson08.floor_us(32768, 1024, 4260)
    assert right == pytest.approx((4 * 32768 * 1024 * 2 + 4 * 32768 + 3 * 1024 * 2) / 4260e9 * 1e6)
    assert lesson08.check_floor_time(right)
    assert lesson08.check_floor_time(lesson08.floor_us(8192, 768, 4000, True), 8192, 768, 4000, overwrite=True)
    for wrong, says in [(None, "replace None"), ("soon", "give a number"), (right / 1000, "milliseconds"),
                        (lesson08.floor_us(32768, 1024, 4260, True), "other mode"), (2 * right, "bf16"),
                        (right / 2, "both directions"), (right * 1.3, "off by")]:
        v = lesson08.check_floor_time(wrong)
        assert not v.passed and says in v.message, (wrong, v.message)


def test_lesson08_partials_fraction():
    right = lesson08.partials_fraction(4096, 16384, 132)
    assert right == pytest.approx(2 * 132 * 16384 * 4 / V7.bytes_moved(4096, 16384))
    assert lesson08.check_partials_fraction(right)
    for wrong, says in [(None, "replace None"), (100 * right, "percentage"), (right / 2, "half"),
                        (2 * right, "twice"), (0.5, "is off")]:
        v = lesson08.check_partials_fraction(wrong)
        assert not v.passed and says in v.message, (wrong, v.message)


# ------------------------------------------------------------------------------------------------------
# on the GPU


def _gradient(p, overwrite):
    return reference.backward(p["dout"], p["inp"], p["weight"], p["rstd"], None if overwrite else p["dinp"],
                              p["dweight"])


def _ok(N, got, want):
    tol = check.tolerances(bf16.bfloat16, N)
    a = check.compare(got[0], want[0], *tol["dinp"], name="dinp")
    b = check.compare(got[1], want[1], *tol["dweight"], name="dweight")
    assert a.ok and b.ok, f"{a}\n{b}"


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
    got = kernels.run(V7, p["dout"], p["inp"], p["weight"], p["rstd"], p["dinp"], p["dweight"], overwrite=overwrite)
    _ok(N, got, _gradient(p, overwrite))
    L = kernels.launcher(V7, N, C, overwrite=overwrite)
    assert L._v7.shape == kernels.v7_shape(C, overwrite=overwrite)  # the plan ran the shape this file expects
    assert L._v7.shape.prefetch == (not overwrite and 1024 <= C <= 8192)
    assert L.smem == V7.dynamic_smem(C, 512)


def _tuned(N, C, block=None, **tuning):
    kernels.V7_TUNING.clear()
    kernels.V7_TUNING.update(tuning)
    try:
        L = kernels.Launcher(V7, N, C, block_size=block)
        kernels._v7_config(L)
    finally:
        kernels.V7_TUNING.clear()
    return L


def _run(L, p):
    from pycuda import gpuarray

    import rmsnorm_lessons as rl

    dev = {k: gpuarray.to_gpu(np.ascontiguousarray(p[k])) for k in ("dout", "inp", "weight", "rstd", "dinp", "dweight")}
    L(kernels.Buffers(**{k: v.gpudata for k, v in dev.items()}))
    rl.gpu.synchronize()
    return dev["dinp"].get(), dev["dweight"].get()


@pytest.mark.gpu
@pytest.mark.parametrize("N,C", [(4099, 1600), (2053, 16384), (9001, 768), (4097, 4096)])
def test_fused_and_kernel_reductions_are_bitwise_equal(N, C):
    p = reference.random_problem(N, C, bf16.bfloat16, seed=N, accumulate=True)
    fused = _run(_tuned(N, C), p)
    second = _run(_tuned(N, C, reduce="kernel"), p)
    assert np.array_equal(bf16.bits(fused[0]), bf16.bits(second[0]))
    assert np.array_equal(bf16.bits(fused[1]), bf16.bits(second[1]))
    _ok(N, fused, _gradient(p, False))


@pytest.mark.gpu
@pytest.mark.parametrize("tuning", [dict(K=1), dict(K=2), dict(K=3), dict(K=4), dict(block=256),
                                    dict(block=128), dict(block=256, per_sm=1), dict(prefetch=0),
                                    dict(prefetch=1, block=256), dict(prefetch=1, reduce="kernel")])
def test_launch_variants_are_right(tuning):
    N, C = 2053, 1024
    p = reference.random_problem(N, C, bf16.bfloat16, seed=77, accumulate=True)
    tuning = dict(tuning)
    L = _tuned(N, C, tuning.pop("block", None), **tuning)
    _ok(N, _run(L, p), _gradient(p, False))


@pytest.mark.gpu
def test_C_beyond_16384_refused_before_launching():
    p = reference.random_problem(2, 16392, bf16.bfloat16, seed=1)
    with pytest.raises(ValueError, match=r"the largest C it can run is 16384"):
        kernels.run(V7, p["dout"], p["inp"], p["weight"], p["rstd"])


def test_bench_command_writes_every_row(tmp_path, monkeypatch):
    """``bench --peers --json --plot`` with the GPU parts replaced by fakes: rows, JSON and picture."""
    import json

    from rmsnorm_lessons import cli, gpu

    shapes = [(8192, 768), (1024, 4096)]
    calls = {}

    def fake_sweep(versions, shapes_, repeats=50, check=True, copy_gbps=None, overwrite=False):
        calls["sweep"] = (versions, shapes_, overwrite)
        out = []
        for N, C in shapes_:
            out += [_t("v6_last_block", N, C, 2.0, copy=copy_gbps), _t("v7_fast", N, C, 1.0, copy=copy_gbps)]
            if overwrite:
                out.append(_t("v7_fast (dinp=)", N, C, 0.8, copy=copy_gbps))
        return out

    def fake_peers(shapes_, names=None, repeats=50, copy_gbps=None, log=None):
        return [_t(name, N, C, 3.0, copy=copy_gbps) for N, C in shapes_ for name in peers.PEERS]

    monkeypatch.setattr(gpu, "require", lambda: None)
    monkeypatch.setattr(gpu, "copy_bandwidth", lambda: 4000.0)
    monkeypatch.setattr(bench, "sweep", fake_sweep)
    monkeypatch.setattr(peers, "sweep", fake_peers)
    out_json, out_png = tmp_path / "bench.json", tmp_path / "bench.png"
    rc = cli.main(["bench", "v6_last_block", "v7_fast", "--shapes", "8192x768,1024x4096", "--peers",
                   "--json", str(out_json), "--plot", str(out_png)])
    assert rc == 0
    assert calls["sweep"] == (["v6_last_block", "v7_fast"], shapes, True)  # overwrite rows follow --peers
    rows = json.loads(out_json.read_text())
    assert len(rows) == 2 * 6
    assert [r["name"] for r in rows[:6]] == ["v6_last_block", "v7_fast", "v7_fast (dinp=)", *peers.PEERS]
    for r in rows:
        assert {"name", "N", "C", "ms", "gbps", "percent_of_copy", "speedup_over_v6"} <= set(r)
    assert rows[2]["speedup_over_v6"] == pytest.approx(2.5)
    assert out_png.stat().st_size > 1000
    rc = cli.main(["bench", "v7_fast", "--shapes", "8192x768", "--no-peers"])
    assert rc == 0 and calls["sweep"][2] is False


# ------------------------------------------------------------------------------------------------------
# the streaming ceiling and the fixed-cost fit (tools/v7_explore.py, tools/v7_fixed_cost.py, lesson 08)


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
    assert not res.spills and res.registers <= 32  # 2048 threads per SM: 4 blocks of 512


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
