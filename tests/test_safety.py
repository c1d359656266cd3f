"""Safe in a real process (CPU): every input ``run`` refuses never reaches the GPU.

Each refusal is checked, with its message, with ``gpu.require`` (and the launcher and the
compiler) replaced by a function that fails the test: a refusal that touched the GPU first would say
"GPU touched" instead. On the GPU: memory, aliasing and the shared-memory edge in
tests/test_safety_gpu.py, threads and streams in tests/test_safety_concurrency.py.
"""
import re

import numpy as np
import pytest
from _gpu_support import TENSORS, FakeGPUArray, fakes

import rmsnorm_lessons as rl
from rmsnorm_lessons.core import build, gpu, ladder, launch, reference
from rmsnorm_lessons.core.ladder.v7_fast import Config

SHIPPED = tuple(r.name for r in ladder.SHIPPED)
MiB = 1 << 20


def _args(p):
    return [p[k] for k in TENSORS]


def _problem(version, N=6, C=None, seed=0):
    spec = ladder.get(version)
    return reference.random_problem(N, C or 8 * spec.c_multiple, spec.dtype, seed=seed)


def _refused(version, error, rule, N=6, C=None, **options):
    """run(version, **options) on a small problem (N x C) raises ``error`` matching ``rule``."""
    p = _problem(version, N, C)
    with pytest.raises(error, match=rule):
        rl.run(version, *_args(p), **options)


@pytest.fixture
def no_gpu(monkeypatch):
    """Anything that would reach the GPU (or compile for it) fails the test."""

    def touched(*args, **kwargs):
        raise AssertionError("GPU touched")

    monkeypatch.setattr(gpu, "require", touched)
    monkeypatch.setattr(gpu, "facts", touched)
    monkeypatch.setattr(launch, "launcher", touched)
    monkeypatch.setattr(build, "source_module", touched)


def test_the_guard_works(no_gpu):
    _refused("v2_warp", AssertionError, "GPU touched")


# --------------------------------------------------------------------------------------------------
# refused before the GPU (CPU)


@pytest.mark.parametrize("block", [0, 33, 2048, -32, 1000, 1056])
def test_block_size_out_of_range(no_gpu, block):
    _refused("v1_naive", ValueError,
             rf"^block_size for v1_naive must be a multiple of 32 from 32 to 1024, "
             rf"got {block}$", block_size=block)


@pytest.mark.parametrize("block,kind",
                         [(256.5, "float"), ("256", "str"), (True, "bool"),
                          (np.float64(256), "float64"),
                                        ([256], "list")])
def test_block_size_of_the_wrong_type(no_gpu, block, kind):
    _refused("v1_naive", TypeError,
             rf"^block_size must be an int \(threads per block\) or None, got "
             rf"{kind} ", block_size=block)


@pytest.mark.parametrize("version", [r.name for r in ladder.SHIPPED if r.max_block < 1024])
def test_block_size_past_the_launch_bounds(no_gpu, version):
    most = ladder.get(version).max_block
    _refused(version, ValueError,
             rf"^block_size for {version} must be a multiple of 32 from 32 to {most} "
             rf"\(its __launch_bounds__\), got 1024$", block_size=1024)


def test_numpy_ints_are_block_sizes():
    from rmsnorm_lessons.core import validate

    assert validate.block_size(ladder.get("v2_warp"), np.int64(128)) == 128
    assert validate.block_size(ladder.get("v2_warp"), None) == 256


def test_v7_block_too_small_for_the_row(no_gpu):
    _refused("v7_fast", ValueError,
             r"v7_fast keeps a row in one block's registers: at C=4096 .*more than "
             r"block_size=96; the largest C at this block size is \d+", N=2, C=4096, block_size=96)


def test_a_width_no_gpu_can_hold_is_refused_before_the_gpu(no_gpu):
    # v6 stages 2 * C floats per block: at C = 1,000,000 that is 8 MB, more than any GPU gives
    # a block
    _refused("v6_last_block", ValueError,
             r"^v6_last_block at C=1000000 needs \d+ bytes of dynamic shared "
             r"memory per block \(block of 512\); no GPU allows a block more "
             r"than 232448 bytes$", N=1, C=1_000_000)


@pytest.mark.parametrize("value,kind",
                         [("no", "str"), (1, "int"), (None, "NoneType"), (0.0, "float")])
def test_overwrite_must_be_a_bool(no_gpu, value, kind):
    _refused("v7_fast", TypeError, rf"^overwrite must be True or False, got {kind} ",
             overwrite=value)


def test_overwrite_where_not_offered(no_gpu):
    _refused("v6_last_block", ValueError,
             r"^overwrite=True \(dinp = instead of \+=\) is not offered by "
             r"v6_last_block$", overwrite=True)


@pytest.mark.parametrize("version", [["v1_naive"], ("v1_naive",), 1, None, np.float32])
def test_version_of_the_wrong_type(no_gpu, version):
    p = _problem("v1_naive")
    with pytest.raises(TypeError, match=r"^version must be a version name \(str\) or a Rung, got "):
        rl.run(version, *_args(p))


def test_unknown_version(no_gpu):
    p = _problem("v1_naive")
    known = re.escape(", ".join(ladder.VERSIONS))
    with pytest.raises(ValueError, match=rf"^version must be one of {known}; got 'v1'$"):
        rl.run("v1", *_args(p))


@pytest.mark.parametrize("name", ["dout", "inp", "weight", "dinp", "dweight"])
def test_big_endian_float32_refused(no_gpu, name):
    p = _problem("v1_naive")
    p[name] = p[name].astype(">f4")
    with pytest.raises(TypeError,
                       match=rf"^{name} must be native float32 for v1_naive, got big-endian "
                             rf"float32$"):
        rl.run("v1_naive", *_args(p))


@pytest.mark.parametrize("version", ["v1_naive", "v6_last_block"])
def test_big_endian_rstd_refused(no_gpu, version):
    p = _problem(version)
    p["rstd"] = p["rstd"].astype(">f4")
    with pytest.raises(TypeError,
                       match=r"^rstd must be native float32 \(the forward pass caches it in "
                             r"fp32\), got big-endian float32$"):
        rl.run(version, *_args(p))


@pytest.mark.parametrize("version", ["v2_warp", "v6_last_block"])
def test_C_past_2_30_refused(no_gpu, version):
    C = 2**30 + 8
    f = fakes(version, 1, C)
    with pytest.raises(ValueError,
                       match=r"^C \(the last dim of inp\) must be at most 2\*\*30 \(kernels index "
                             rf"columns with int\), got {C}$"):
        rl.run(version, *[f[k] for k in TENSORS])
    assert rl.validate.inputs(version, *[fakes(version, 1, 2**30)[k] for k in TENSORS]).C == 2**30


@pytest.mark.parametrize("version", [r.name for r in ladder.SHIPPED if r.config_check is None])
def test_config_is_only_for_v7(no_gpu, version):
    _refused(version, ValueError, rf"^config is for v7_fast's variants; {version} takes none$",
             config=Config())


@pytest.mark.parametrize("config,rule", [
    (Config(K=4, prefetch=True), r"prefetch needs K = 2 .*got K=4"),
    (Config(K=1), r"at C=16384 a row needs 2048 threads of 1 chunks, more than block_size=512"),
])
def test_a_v7_config_that_cannot_run_this_C(no_gpu, config, rule):
    _refused("v7_fast", ValueError, rule, N=2, C=16384, config=config)


@pytest.mark.parametrize("kwargs,rule", [
    (dict(K=5), r"Config.K \(chunks per thread\) must be an int 1..4 or None, got 5"),
    (dict(K=True), r"Config.K"), (dict(K=2.0), r"Config.K"),
    (dict(prefetch=1), r"Config.prefetch must be True, False or None, got 1"),
    (dict(per_sm=0), r"Config.per_sm \(blocks per SM\) must be an int >= 1 or None, got 0"),
])
def test_a_bad_config_is_refused_when_made(kwargs, rule):
    with pytest.raises(ValueError, match=rule):
        Config(**kwargs)


def test_v7_C_past_its_limit(no_gpu):
    _refused("v7_fast", ValueError,
             r"C=65544 is wider than 4 blocks of 512 threads hold; the largest C "
             r"is 65536", N=2, C=65544)


@pytest.mark.parametrize("stream,error,rule", [
    ("s", TypeError,
     r"^stream must be None, a PyCUDA Stream, a PyTorch stream or an int CUstream handle, got "
     r"builtins.str$"),
    (object(), TypeError, r"got builtins.object$"),
    (True, TypeError, r"got bool$"),
    (2.5, TypeError, r"got builtins.float$"),
    (-1, ValueError, r"^stream handle must be a CUstream \(a non-negative int\), got -1$"),
])
def test_a_stream_of_the_wrong_kind(no_gpu, stream, error, rule):
    _refused("v2_warp", error, rule, stream=stream)


def test_gpuarray_outputs_required(no_gpu):
    f = fakes("v6_last_block")
    with pytest.raises(ValueError,
                       match=r"^dinp and dweight must be given as GPUArrays when the inputs are "
                             r"GPUArrays$"):
        rl.run("v6_last_block", f["dout"], f["inp"], f["weight"], f["rstd"])


@pytest.mark.parametrize("version", ["v2_warp", "v6_last_block"])
def test_outputs_sharing_memory_refused(no_gpu, version):
    f = fakes(version)
    cases = [
        (dict(dweight=f["weight"]),
         r"^dweight is the same memory as weight: an output may not share memory"),
        (dict(dinp=f["dout"]), r"^dinp is the same memory as dout: "),
        (dict(dinp=f["inp"]), r"^dinp is the same memory as inp: "),
        (dict(dinp=FakeGPUArray(f["dinp"].shape, f["dinp"].dtype, int(f["inp"].gpudata) + 64)),
         r"^dinp overlaps inp: "),
        (dict(dweight=FakeGPUArray((16,), f["dweight"].dtype, int(f["dinp"].gpudata) + 64)),
         r"^dinp overlaps dweight: "),
        (dict(dweight=FakeGPUArray((16,), f["dweight"].dtype, int(f["rstd"].gpudata) + 16)),
         r"^dweight overlaps rstd: "),
    ]
    for replace, rule in cases:
        g = {**f, **replace}
        with pytest.raises(ValueError, match=rule):
            rl.run(version, *[g[k] for k in TENSORS])
    # inputs may share memory with each other (read only): dout is inp
    g = {**f, "dout": f["inp"]}
    assert rl.validate.inputs(version, *[g[k] for k in TENSORS]).N == 6


def test_numpy_outputs_sharing_memory_refused(no_gpu):
    p = reference.random_problem(6, 16, np.float32, seed=5)
    flat = np.zeros(6 * 16 + 16, np.float32)
    cases = [
        (dict(dweight=p["weight"]), r"^dweight is the same memory as weight: "),
        (dict(dinp=p["inp"]), r"^dinp is the same memory as inp: "),
        (dict(dinp=flat[:96].reshape(6, 16), dweight=flat[90:106]), r"^dinp overlaps dweight: "),
        (dict(dout=flat[:96].reshape(6, 16), dinp=flat[16:112].reshape(6, 16)),
         r"^dinp overlaps dout: "),
    ]
    for replace, rule in cases:
        g = {**p, **replace}
        # before the GPU is asked for (no_gpu would raise)
        with pytest.raises(ValueError, match=rule):
            rl.run("v2_warp", *[g[k] for k in TENSORS])
    g = {**p, "dout": p["inp"]}  # inputs may share memory (read only)
    assert rl.validate.inputs("v2_warp", *[g[k] for k in TENSORS]).N == 6


def _misalignments():
    """(version, offset, alignment): every rung, off by one byte and by half its alignment (16 for
    the 128-bit rungs, the element's size for the others)."""
    for r in ladder.SHIPPED:
        align = 16 if r.c_multiple > 1 else r.dtype.itemsize
        for offset in sorted({1, align // 2}):
            yield r.name, offset, align


@pytest.mark.parametrize("version,offset,align", list(_misalignments()))
def test_misaligned_views_refused(no_gpu, version, offset, align):
    f = fakes(version)
    f["inp"] = FakeGPUArray(f["inp"].shape, f["inp"].dtype, int(f["inp"].gpudata) + offset)
    why = "128-bit loads" if align == 16 else "its element size"
    with pytest.raises(ValueError,
                       match=rf"^inp must start on a {align}-byte boundary for {version} "
                             rf"\({why}\); its "
                             rf"address ends in {offset:#x}$"):
        rl.run(version, *[f[k] for k in TENSORS])


def test_rstd_needs_only_4_byte_alignment(no_gpu):
    f = fakes("v6_last_block")
    f["rstd"] = FakeGPUArray(f["rstd"].shape, np.float32, int(f["rstd"].gpudata) + 4)
    assert rl.validate.inputs("v6_last_block", *[f[k] for k in TENSORS]).N == 6
    f["rstd"] = FakeGPUArray(f["rstd"].shape, np.float32, int(f["rstd"].gpudata) + 2)
    with pytest.raises(ValueError,
                       match=r"^rstd must start on a 4-byte boundary for v6_last_block"):
        rl.run("v6_last_block", *[f[k] for k in TENSORS])
