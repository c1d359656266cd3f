"""The ladder as data (CPU): every shipped rung's plan, checked against its CUDA; the defines the
builds pass; a learner's rung registered from a source string.

Plans are pure data (:func:`rmsnorm_lessons.core.ladder.plan` on ``gpu.H200`` or a made-up device),
so every launch of every rung can be checked here without a GPU: its kernel is one the rung lists,
its grid and block are legal, its arguments match the kernel's parameters as the ``.cu`` file
declares them (count, order, names, pointer or int), its shared memory is the rung's, and its
scratch does not grow with N.
"""
import dataclasses
import importlib

import numpy as np
import pytest
from _gpu_support import kernel_signatures, reference_of, rung_signatures

import rmsnorm_lessons as rl
from rmsnorm_lessons.core import build, gpu, ladder, launch
from rmsnorm_lessons.core.ladder import Launch, Scratch, Tensor, v6_last_block, v7_fast
from rmsnorm_lessons.course import registry

SHIPPED = tuple(r.name for r in ladder.SHIPPED)
H200 = gpu.H200
SMALL_GPU = dataclasses.replace(gpu.H200, name="a made-up GPU", multiprocessors=20)
# grids bounded by the SMs
# odd N, N = 1, C not a power of two (and odd C for the fp32 rungs), the largest C of v7
SHAPES = [(1, 8), (3, 24), (37, 776), (129, 777), (1001, 1600), (4099, 5120), (70001, 768),
          (5, 16384)]


def _cases():
    for v in SHIPPED:
        for N, C in SHAPES:
            if C % ladder.get(v).c_multiple == 0:
                yield v, N, C


CASES = list(_cases())


def _plans(version, N, C, device=H200):
    """Every plan a rung makes at (N, C): both modes where it offers overwrite."""
    rung = ladder.get(version)
    out = [ladder.plan(version, N, C, device)]
    if rung.overwrite_mode:
        out.append(ladder.plan(version, N, C, device, overwrite=True))
    return out


def test_the_shipped_ladder():
    # the registry's lines, in course order, each the name of its module's RUNG
    assert SHIPPED == tuple(ladder.RUNGS)
    assert len(set(SHIPPED)) == len(SHIPPED)
    # every rung a lesson builds is shipped, in the order the lessons build them
    built = [lesson.rung for lesson in registry.LESSONS if lesson.rung is not None]
    assert built == [name for name in SHIPPED if name in built]
    assert ladder.VERSIONS[:len(SHIPPED)] == SHIPPED
    assert rl.ladder.VERSIONS == ladder.VERSIONS
    for v in SHIPPED:
        rung = ladder.get(v)
        assert rung.name == v and rung.source is None and rung.kernels
        assert ladder.get(rung) is rung
        assert build.kernel_path(v).is_file()


@pytest.mark.parametrize("version,N,C", CASES, ids=[f"{v}-{N}x{C}" for v, N, C in CASES])
def test_every_launch_is_legal(version, N, C):
    rung = ladder.get(version)
    sigs = rung_signatures(rung)
    for device in (H200, SMALL_GPU):
        for plan in _plans(version, N, C, device):
            assert plan, f"{version} plans no launch"
            # the first launch is the main kernel: the rung's first, or one of v7_fast's other row
            # paths
            first = plan[0].kernel
            assert first in rung.kernels and not first.startswith("reduce"), first
            if plan[0].kernel != rung.kernels[0]:
                assert version == "v7_fast"
            for L in plan:
                assert isinstance(L, Launch)
                assert L.kernel in rung.kernels
                assert isinstance(L.grid, int) and 1 <= L.grid < 2**31
                assert isinstance(L.block, int) and 32 <= L.block <= 1024 and L.block % 32 == 0
                bound = sigs[L.kernel].max_threads
                assert bound is None or L.block <= bound, \
                    f"{L.kernel}: {L.block} threads > __launch_bounds__"
                if L.kernel == "rmsnorm_backward_v7_staged":  # its own __launch_bounds__(1024, 1)
                    assert L.block <= v7_fast.STAGED_BLOCK
                else:
                    assert L.block <= rung.max_block
                assert isinstance(L.shared, int) and L.shared >= 0
                if L is not plan[0]:
                    assert L.shared == 0, (f"{L.kernel}: only the main kernel takes dynamic shared "
                                           "memory")


@pytest.mark.parametrize("version,N,C", CASES, ids=[f"{v}-{N}x{C}" for v, N, C in CASES])
def test_arguments_match_the_kernels_parameters(version, N, C):
    """Count, order and names from the ``extern "C" __global__`` declaration; a pointer parameter
    gets a Tensor or a Scratch (passed as a 64-bit address), an int parameter an int that fits 32
    bits."""
    sigs = rung_signatures(version)
    for plan in _plans(version, N, C):
        for L in plan:
            params = sigs[L.kernel].params
            assert [name for name, _ in L.args] == [p.name for p in params], L.kernel
            for (name, value), p in zip(L.args, params):
                if p.pointer:
                    assert isinstance(value,
                                      (Tensor,
                                       Scratch)), f"{L.kernel}: {name} is a pointer, got {value!r}"
                else:
                    assert p.ctype == "int", (f"{L.kernel}: {name} is {p.ctype}; the launcher "
                                              "passes ints as int32")
                    assert isinstance(value,
                                      int) and not isinstance(value, bool) and 0 <= value < 2**31, (
                        f"{L.kernel}: {name}={value!r}")
                if isinstance(value, Tensor):
                    assert value.name in ladder.TENSOR_NAMES
            named = {name: value for name, value in L.args}
            for k in ("N", "C"):
                if k in named:
                    assert named[k] == {"N": N, "C": C}[k]


@pytest.mark.parametrize("version,N,C", CASES, ids=[f"{v}-{N}x{C}" for v, N, C in CASES])
def test_main_kernel_shared_memory_is_the_rungs(version, N, C):
    rung = ladder.get(version)
    for block in sorted({rung.block_size, 256, 128}):
        if version == "v7_fast":
            try:
                need = ladder.shared_memory(version, C, block)
            except ValueError:  # a row of this C does not fit this block
                continue
            # v7's shared_memory is enough for either mode on the register path: the larger of the
            # two plans'
            registers = v7_fast.Config(staged=False)
            modes = [ladder.plan(version, N, C, H200, block_size=block, overwrite=o,
                                 config=registers)[0].shared
                     for o in (False, True)]
            assert max(modes) == need
            # rows the plan stages take what the device has (at least two slots a group), and fall
            # back to the register path where that does not fit
            for o in (False, True):
                main = ladder.plan(version, N, C, H200, block_size=block, overwrite=o)[0]
                if main.kernel == "rmsnorm_backward_v7_staged":
                    most = H200.shared_memory_per_block_optin - v7_fast.STAGED_STATIC_SHARED
                    assert need <= main.shared <= most
        else:
            main = ladder.plan(version, N, C, H200, block_size=block)[0]
            assert main.shared == ladder.shared_memory(version, C, block)


@pytest.mark.parametrize("C", [8, 776, 1600, 5120, 16384])
@pytest.mark.parametrize("version", SHIPPED)
def test_scratch_and_grid_do_not_grow_with_N(version, C):
    if C % ladder.get(version).c_multiple:
        pytest.skip("C rule")

    def scratch(N):
        return {v.name: (v.nbytes, v.zero) for L in ladder.plan(version, N, C, H200)
                for _, v in L.args if isinstance(v, Scratch)}

    big = scratch(10**6)
    assert scratch(10**5) == big
    for N in (1, 7, 1000, 4099, 70001):
        small = scratch(N)
        assert small.keys() == big.keys()
        assert all(small[k][0] <= big[k][0]
                   for k in big), "scratch at a small N larger than at a large N"
    for L in ladder.plan(version, 10**6, C, H200):
        for _, v in L.args:
            if isinstance(v, Scratch):
                most = (32 + 2 * 4 * H200.multiprocessors * C) * 4
                assert v.nbytes <= most, f"{v!r}: not bounded by C x SMs"
    g5, g6 = (ladder.plan(version, N, C, H200)[0].grid for N in (10**5, 10**6))
    if g5 == g6:  # a persistent grid: a few blocks per SM, whatever N
        assert g6 <= 4 * H200.multiprocessors
    else:  # one thread or one warp per row: the grid follows the rows
        assert g6 >= 9 * g5


@pytest.mark.parametrize("N,C", [(1, 8), (37, 776), (70001, 1600), (4099, 16384)])
def test_v6_scratch_header_is_the_define(N, C):
    assert ladder.get("v6_last_block").defines == v6_last_block.DEFINES == {"V6_SCRATCH_HEADER": 32}
    (L,) = ladder.plan("v6_last_block", N, C, H200)
    s = dict(L.args)["scratch"]
    # the ticket counter: zeroed when allocated, left at zero by every launch
    assert s.zero == "once"
    assert s.nbytes % 4 == 0
    assert s.nbytes // 4 - 2 * C * L.grid == v6_last_block.DEFINES["V6_SCRATCH_HEADER"]


@pytest.mark.parametrize("N,C", [(1, 8), (37, 776), (70001, 1600), (4099, 16384)])
@pytest.mark.parametrize("overwrite", [False, True])
def test_v7_partials_are_shared_by_its_two_kernels(N, C, overwrite):
    assert ladder.get("v7_fast").defines == v7_fast.DEFINES
    assert set(v7_fast.DEFINES) == {"V7_MAX_BLOCK", "V7_QUADS_PER_PASS", "V7_REDUCE_BATCH",
                                    "V7_STAGED_BLOCK"}
    plan = ladder.plan("v7_fast", N, C, H200, overwrite=overwrite)
    scratches = {dict(L.args)["partials"] for L in plan}
    assert len(scratches) == 1, "the main kernel and the reduce kernel share one buffer of partials"
    (s,) = scratches
    assert s.zero == "none" and s.nbytes == plan[0].grid * C * 4
    assert ladder.get("v7_fast").max_block == v7_fast.DEFINES["V7_MAX_BLOCK"]


def test_only_v6_and_v7_take_defines():
    for v in SHIPPED:
        assert bool(ladder.get(v).defines) == (v in ("v6_last_block", "v7_fast"))


@pytest.mark.parametrize("version", ["v6_last_block", "v7_fast"])
def test_the_build_passes_the_defines(version):
    # the .cu file #errors without them: that it compiles at all says they were passed
    src = build.kernel_source(version)
    for name in ladder.get(version).defines:
        assert f"#ifndef {name}" in src and f'#error "{name} must be defined by the build' in src
    compiled = build.compile_file(version, "sm_90")
    assert set(ladder.get(version).kernels) <= set(compiled.resources)


@pytest.mark.parametrize("version,missing", [("v6_last_block", "V6_SCRATCH_HEADER")] +
                         [("v7_fast", d) for d in v7_fast.DEFINES])
def test_a_missing_define_is_a_compile_error_naming_it(version, missing):
    defines = {k: v for k, v in ladder.get(version).defines.items() if k != missing}
    with pytest.raises(build.CompileError, match=rf"{missing} must be defined by the build"):
        build.compile_source(build.kernel_source(version), "sm_90",
                             name=f"{version}_without_{missing}",
                             defines=defines)


# the rungs whose module states its blocks per SM (a persistent grid of that many)
FIXED_PER_SM = [r.name for r in ladder.SHIPPED
                if hasattr(importlib.import_module(f"{ladder.__name__}.{r.name}"), "BLOCKS_PER_SM")]


@pytest.mark.parametrize("version", FIXED_PER_SM)
def test_blocks_per_sm_is_read_from_the_plan(version):
    module = importlib.import_module(f"rmsnorm_lessons.core.ladder.{version}")
    for device in (H200, SMALL_GPU):
        assert ladder.blocks_per_sm(version, 4096, device) == module.BLOCKS_PER_SM


def test_v7_runs_one_block_per_sm():
    assert ladder.blocks_per_sm("v7_fast", 4096, H200) == 1  # one 512-thread block per SM


def test_get_refuses_what_is_not_a_version():
    with pytest.raises(ValueError,
                       match=rf"version must be one of {', '.join(ladder.VERSIONS)}; got 'v8'"):
        ladder.get("v8")
    with pytest.raises(TypeError,
                       match=r"version must be a version name \(str\) or a Rung, got list"):
        ladder.get(["v1_naive"])
    with pytest.raises(TypeError, match=r"register takes a Rung, got str"):
        ladder.register("v1_naive")


def test_a_plan_prints():
    text = "\n".join(str(L) for L in ladder.plan("v5_two_pass", 8192, 1024, H200))
    assert "rmsnorm_backward_v5<<<264, 512, 11776>>>(dinp=dinp, partials=scratch 'partials'" in text
    assert "reduce_dweight_v5<<<4, 256, 0>>>(dweight=dweight, partials=scratch 'partials' (" in text


def test_the_kernel_signature_parser():
    sigs = kernel_signatures("""
        // extern "C" __global__ void commented_out(int x) {}
        extern "C" __global__ void __launch_bounds__(256, 2)
        k1(float* a, const __nv_bfloat16* __restrict__ b, int n /* rows */, long long m) { }
        extern "C" __global__ void __launch_bounds__(ns::MAX) k2(const float* p) { }
        extern "C" __global__ void k3() { }
    """)
    assert list(sigs) == ["k1", "k2", "k3"]
    assert [(p.name, p.pointer, p.ctype) for p in sigs["k1"].params] == [
        ("a", True,
         "float*"), ("b", True, "const __nv_bfloat16* __restrict__"), ("n", False, "int"),
        ("m", False, "long long")]
    assert sigs["k1"].max_threads == 256 and sigs["k2"].max_threads is None
    assert sigs["k2"].launch_bounds == "ns::MAX"
    assert sigs["k3"].params == ()


# --------------------------------------------------------------------------------------------------
# a learner's rung: v2's kernel under another name, registered from its source text


def _my_v2_source() -> str:
    src = build.kernel_source("v2_warp")
    assert src.count("rmsnorm_backward_v2") == 1
    return src.replace("rmsnorm_backward_v2", "my_v2")


def _my_v2_plan(N, C, device, *, block, overwrite=False, config=None):
    return [Launch("my_v2", ladder.ceil_div(N, block // 32), block, 0, ladder.standard_args(N, C))]


@pytest.fixture
def my_v2():
    before = ladder.VERSIONS
    rung = ladder.rung_from_source(name="my_v2", source=_my_v2_source(), plan=_my_v2_plan,
                                   kernels=("my_v2",),
                                   dtype=np.float32, adds="v2, typed by a learner")
    try:
        yield rung
    finally:
        ladder.unregister("my_v2")
        launch.release()
    assert ladder.VERSIONS == before


def test_a_registered_rung_joins_the_ladder(my_v2):
    before = tuple(v for v in ladder.VERSIONS if v != "my_v2")
    assert ladder.VERSIONS == before + ("my_v2",)
    assert "my_v2" in rl.ladder.VERSIONS and "my_v2" in rl.ladder.VERSIONS
    assert ladder.get("my_v2") is my_v2 and rl.ladder.get("my_v2") is my_v2
    assert my_v2.source == _my_v2_source() and my_v2.kernels == ("my_v2",)
    plan = ladder.plan("my_v2", 1001, 777, H200)
    assert [(L.kernel, L.grid, L.block, L.shared) for L in plan] == [("my_v2", 126, 256, 0)]
    # its plan's arguments match its own source's declaration, as the shipped rungs' do
    assert [n for n,
            _ in plan[0].args] == [p.name for p in rung_signatures("my_v2")["my_v2"].params]
    assert ladder.shared_memory("my_v2", 777) == 0


def test_unregister_restores_the_ladder(my_v2):
    others = tuple(v for v in ladder.VERSIONS if v != "my_v2")
    ladder.unregister("my_v2")
    assert "my_v2" not in ladder.VERSIONS and "my_v2" not in rl.ladder.VERSIONS
    assert ladder.VERSIONS == others and ladder.VERSIONS[:len(SHIPPED)] == SHIPPED
    with pytest.raises(ValueError, match=r"version must be one of"):
        ladder.get("my_v2")
    ladder.register(my_v2)  # back, for the fixture to remove
    assert ladder.get("my_v2") is my_v2


def test_a_registered_rung_compiles_and_reports(my_v2):
    res = build.resources("my_v2")
    assert set(res) == {"my_v2"} and 0 < res["my_v2"].registers <= 255
    assert build.resources(my_v2) == res
    from rmsnorm_lessons.inspection import sass

    text = sass.report("my_v2")
    assert text.startswith("my_v2 (sm_90): ") and "registers" in text


def test_a_shipped_rung_cannot_be_replaced(my_v2):
    v2 = ladder.get("v2_warp")
    for replace in (False, True):
        with pytest.raises(ValueError,
                           match=r"'v2_warp' is a shipped rung; give yours another name"):
            ladder.register(dataclasses.replace(v2, adds="mine now"), replace=replace)
    with pytest.raises(ValueError, match=r"'v2_warp' is a shipped rung"):
        ladder.rung_from_source(name="v2_warp", source=_my_v2_source(), plan=_my_v2_plan,
                                kernels=("my_v2",),
                                dtype=np.float32)
    with pytest.raises(ValueError, match=r"'v2_warp' is a shipped rung and stays on the ladder"):
        ladder.unregister("v2_warp")
    assert ladder.get("v2_warp") is v2 and ladder.VERSIONS[:len(SHIPPED)] == SHIPPED


def test_a_registered_name_is_replaced_only_when_asked(my_v2):
    other = dataclasses.replace(my_v2, adds="another version of it")
    with pytest.raises(ValueError,
                       match=r"a rung named 'my_v2' is registered already; pass replace=True"):
        ladder.register(other)
    ladder.register(my_v2)  # the same rung again: fine
    again = ladder.rung_from_source(name="my_v2", source=_my_v2_source(), plan=_my_v2_plan,
                                    kernels=("my_v2",),
                                    # a re-run notebook cell replaces it
                                    dtype=np.float32, adds="re-run cell")
    assert ladder.get("my_v2") is again and ladder.VERSIONS.count("my_v2") == 1


def test_rung_from_source_refuses_bad_input():
    with pytest.raises(ValueError, match=r"source must be the kernel's CUDA C text"):
        ladder.rung_from_source(name="x1", source="  ", plan=_my_v2_plan, kernels=("my_v2",),
                                dtype=np.float32)
    with pytest.raises(ValueError, match=r"name must be a plain identifier"):
        ladder.rung_from_source(name="my v2", source=_my_v2_source(), plan=_my_v2_plan,
                                kernels=("my_v2",),
                                dtype=np.float32)
    assert "x1" not in ladder.VERSIONS and "my v2" not in ladder.VERSIONS


def test_rung_from_source_like_a_shipped_rung_copies_all_but_what_differs():
    v5, text = ladder.get("v5_two_pass"), build.kernel_source("v5_two_pass")
    mine = ladder.rung_from_source(name="mine_v5", source=text, like="v5_two_pass",
                                   register_it=False)
    assert mine == dataclasses.replace(v5, name="mine_v5", adds="a learner's kernel", source=text)
    assert (mine.plan, mine.dtype, mine.c_multiple, mine.block_size, mine.max_block,
            mine.deterministic,
            mine.shared_memory) == (v5.plan, v5.dtype, 8, 512, 512, True, v5.shared_memory)
    v7 = ladder.get("v7_fast")
    two = ladder.rung_from_source(name="mine_v7", source="x", like=v7, kernels=v7.kernels[:2],
                                  register_it=False)
    assert two.kernels == v7.kernels[:2] and two.defines == v7.defines
    assert two.config_check is not None and "mine_v7" not in ladder.VERSIONS
    assert registry.building(two.name) is None
    assert registry.building(v7.name).stem == "10_v7_one_pass"
    # v7's own check of its variants, copied
    two.check_config(v7_fast.Config(K=2), 4096, 512, False)
    with pytest.raises(ValueError, match=r"prefetch needs K = 2"):
        two.check_config(v7_fast.Config(K=4, prefetch=True), 4096, 512, False)
    with pytest.raises(ValueError, match=r"^config is for v7_fast's variants; mine_v5 takes none$"):
        mine.check_config(v7_fast.Config())
    with pytest.raises(TypeError, match=r"unknown field\(s\) block"):
        ladder.rung_from_source(name="x2", source="x", like="v5_two_pass", block=256)
    with pytest.raises(TypeError,
                       match=r"needs plan, kernels \(or like=, a rung to copy them from\)"):
        ladder.rung_from_source(name="x3", source="x", dtype=np.float32)
    with pytest.raises(ValueError, match=r"version must be one of"):
        ladder.rung_from_source(name="x4", source="x", like="v9_nothing")


def test_the_registry_is_one_list_of_modules():
    assert [r.name for r in ladder.SHIPPED] == ladder.RUNGS == list(SHIPPED)
    assert all(importlib.import_module(f"rmsnorm_lessons.core.ladder.{n}").RUNG is ladder.get(n)
               for n in SHIPPED)
    assert ladder.CONFIG_TAKERS == ["v7_fast"]


@pytest.mark.gpu
def test_a_registered_rung_runs(my_v2):
    from rmsnorm_lessons.core import compare, reference

    p = reference.random_problem(1001, 777, np.float32, seed=5)
    got = rl.run("my_v2", p["dout"], p["inp"], p["weight"], p["rstd"], p["dinp"], p["dweight"])
    report = compare.compare_outputs(my_v2, 1001, got, reference_of(p), name="my_v2")
    assert report.ok, str(report)
