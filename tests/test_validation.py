"""Bad input is refused before anything is launched, with a message naming the argument and the
rule.

The CPU tests call ``rl.validate.inputs``/``run`` with NumPy arrays and with a fake GPUArray
(an object with ``.gpudata``, ``.shape``, ``.dtype``, ``.flags``, ``.strides``); the ``gpu`` tests
use real GPUArrays and real launches. (What ``run`` refuses before touching the GPU, proved with the
GPU fenced off, is in test_safety.py; the shared memory a C needs, in test_validation_smem.py.)
"""
import numpy as np
import pytest
from _gpu_support import FakeGPUArray, compare_both
from _gpu_support import fakes as _fakes

import rmsnorm_lessons as rl
from rmsnorm_lessons.core import bf16, compare, gpu, reference

FP32_VERSIONS = [v for v in rl.ladder.VERSIONS if rl.ladder.get(v).dtype == np.float32]
BF16_VERSIONS = [v for v in rl.ladder.VERSIONS if rl.ladder.get(v).dtype == bf16.bfloat16]
VECTOR_VERSIONS = [v for v in rl.ladder.VERSIONS if rl.ladder.get(v).c_multiple > 1]
ALL = list(rl.ladder.VERSIONS)


def _arrays(version, N=6, C=16, shape=None, seed=0):
    spec = rl.ladder.get(version)
    p = reference.random_problem(N, C, spec.dtype, seed=seed)
    if shape is not None:
        p = {k: (v.reshape(shape[:-1]) if k == "rstd" else v.reshape(shape)
                 if k in ("dout", "inp", "dinp") else v)
             for k, v in p.items()}
    return p


def _call(version, p, **replace):
    a = {**p, **replace}
    return rl.validate.inputs(version, a["dout"], a["inp"], a["weight"], a["rstd"], a["dinp"],
                                a["dweight"])


# --------------------------------------------------------------------------------------------------
# good input passes


@pytest.mark.parametrize("version", ALL)
def test_good_input_passes(version):
    spec = rl.ladder.get(version)
    C = 8 * spec.c_multiple
    shp = _call(version, _arrays(version, 5, C))
    assert (shp.N, shp.C, shp.shape) == (5, C, (5, C))
    shp = _call(version, _arrays(version, 6, C, shape=(2, 3, C)))
    assert (shp.N, shp.C, shp.shape) == (6, C, (2, 3, C))
    shp = _call(version, _fakes(version, 6, C))
    assert (shp.N, shp.C) == (6, C)
    p = _arrays(version, 5, C)
    # outputs optional
    assert rl.validate.inputs(version, p["dout"], p["inp"], p["weight"], p["rstd"]).N == 5


# --------------------------------------------------------------------------------------------------
# shapes


@pytest.mark.parametrize("name,bad,rule", [
    ("dout", (6, 17), r"dout must have shape \(6, 16\) to match inp \(6, 16\), got \(6, 17\)"),
    ("dout", (5, 16), r"dout must have shape \(6, 16\)"),
    ("dinp", (6, 8), r"dinp must have shape \(6, 16\) to match inp"),
    ("dinp", (2, 3, 16), r"dinp must have shape \(6, 16\)"),
    ("weight", (8,), r"weight must have shape \(16,\) to match inp"),
    ("weight", (1, 16), r"weight must have shape \(16,\)"),
    ("dweight", (17,), r"dweight must have shape \(16,\) to match inp"),
    ("rstd", (5,), r"rstd must have shape \(6,\) to match inp"),
    ("rstd", (6, 1), r"rstd must have shape \(6,\)"),
])
@pytest.mark.parametrize("version", ALL)
def test_mismatched_shapes_refused(version, name, bad, rule):
    p = _arrays(version)
    dtype = np.float32 if name == "rstd" else rl.ladder.get(version).dtype
    with pytest.raises(ValueError, match=rule):
        _call(version, p, **{name: np.zeros(bad, dtype)})
    with pytest.raises(ValueError, match=rule):
        _call(version, _fakes(version, **{name: FakeGPUArray(bad, dtype)}))


def test_three_dim_shapes_must_match_exactly():
    p = _arrays("v2_warp", 6, 16, shape=(2, 3, 16))
    with pytest.raises(ValueError,
                       match=r"rstd must have shape \(2, 3\) to match inp \(2, 3, 16\), got "
                             r"\(6,\)"):
        _call("v2_warp", p, rstd=p["rstd"].reshape(6))
    with pytest.raises(ValueError, match=r"dout must have shape \(2, 3, 16\)"):
        _call("v2_warp", p, dout=p["dout"].reshape(3, 2, 16))


@pytest.mark.parametrize("shape", [(16,), (1, 2, 3, 16), ()])
@pytest.mark.parametrize("version", ["v1_naive", "v6_last_block"])
def test_ndim_other_than_2_or_3_refused(version, shape):
    p = _arrays(version)
    dtype = rl.ladder.get(version).dtype
    with pytest.raises(ValueError,
                       match=r"inp must have 2 dims \(N, C\) or 3 dims \(B, T, C\), got shape"):
        _call(version, p, inp=np.zeros(shape, dtype))
    with pytest.raises(ValueError, match=r"inp must have 2 dims"):
        _call(version, _fakes(version, inp=FakeGPUArray(shape, dtype)))


# --------------------------------------------------------------------------------------------------
# dtypes


@pytest.mark.parametrize("name", ["dout", "inp", "weight", "dinp", "dweight"])
@pytest.mark.parametrize("version", ALL)
def test_wrong_dtype_for_the_version_refused(version, name):
    spec = rl.ladder.get(version)
    p = _arrays(version)
    wrong = np.float32 if spec.dtype == bf16.bfloat16 else bf16.bfloat16
    rule = rf"{name} must be native {spec.dtype.name} for {version}, got {np.dtype(wrong).name}$"
    with pytest.raises(TypeError, match=rule):
        _call(version, p, **{name: p[name].astype(wrong)})
    with pytest.raises(TypeError,
                       match=rf"{name} must be native {spec.dtype.name} for {version}, got "
                             r"float64$"):
        _call(version, p, **{name: p[name].astype(np.float64)})
    fake = _fakes(version)
    fake[name] = FakeGPUArray(fake[name].shape, wrong, fake[name].gpudata)
    with pytest.raises(TypeError, match=rule):
        _call(version, fake)


@pytest.mark.parametrize("version", ALL)
def test_rstd_must_be_float32(version):
    p = _arrays(version)
    for wrong in (np.float64, np.float16, bf16.bfloat16):
        with pytest.raises(TypeError,
                           match=r"rstd must be native float32 \(the forward pass caches it in "
                                 r"fp32\), got"):
            _call(version, p, rstd=p["rstd"].astype(wrong))


def test_not_an_array_refused():
    p = _arrays("v2_warp")
    with pytest.raises(TypeError,
                       match=r"dout must be a NumPy array or a PyCUDA GPUArray, got builtins.list"):
        _call("v2_warp", p, dout=p["dout"].tolist())
    with pytest.raises(TypeError, match=r"weight must be a NumPy array or a PyCUDA GPUArray"):
        _call("v2_warp", p, weight=None)


def test_numpy_and_gpuarrays_not_mixed():
    p = _arrays("v6_last_block")
    fakes = _fakes("v6_last_block")
    with pytest.raises(TypeError,
                       match=r"arrays must all be NumPy or all GPUArrays; GPUArrays: dinp"):
        _call("v6_last_block", p, dinp=fakes["dinp"])


def test_unknown_version_refused():
    p = _arrays("v2_warp")
    with pytest.raises(ValueError, match=r"version must be one of v1_naive, v2_warp"):
        _call("v2_wrap", p)


# --------------------------------------------------------------------------------------------------
# memory layout


@pytest.mark.parametrize("name", ["dout", "inp", "weight", "rstd", "dinp", "dweight"])
@pytest.mark.parametrize("version", ["v2_warp", "v6_last_block"])
def test_non_contiguous_arrays_refused(version, name):
    p = _arrays(version, 6, 16)
    a = p[name]
    # the same shape, every other element of a twice-as-big array
    wide = np.zeros(a.shape[:-1] + (2 * a.shape[-1],), a.dtype)
    view = wide[..., ::2]
    view[...] = a
    assert view.shape == a.shape and not view.flags.c_contiguous
    rule = rf"{name} must be C-contiguous \(rows stored one after another\)"
    with pytest.raises(ValueError, match=rule):
        _call(version, p, **{name: view})
    fake = _fakes(version)
    fake[name] = FakeGPUArray(fake[name].shape, fake[name].dtype, fake[name].gpudata,
                              contiguous=False)
    with pytest.raises(ValueError, match=rule):
        _call(version, fake)


def test_transposed_input_refused():
    p = _arrays("v1_naive", 16, 16)
    with pytest.raises(ValueError, match=r"inp must be C-contiguous"):
        _call("v1_naive", p, inp=p["inp"].T)


@pytest.mark.parametrize("offset", [2, 4, 8, 14])
@pytest.mark.parametrize("name", ["dout", "inp", "weight", "dinp", "dweight"])
@pytest.mark.parametrize("version", VECTOR_VERSIONS)
def test_misaligned_gpuarray_views_refused(version, name, offset):
    fake = _fakes(version)
    fake[name] = FakeGPUArray(fake[name].shape, fake[name].dtype, fake[name].gpudata + offset)
    with pytest.raises(ValueError,
                       match=rf"{name} must start on a 16-byte boundary for {version} \(128-bit "
                                         rf"loads\); its address ends in {offset:#x}$"):
        _call(version, fake)


@pytest.mark.parametrize("version", FP32_VERSIONS)
def test_fp32_versions_accept_4_byte_aligned_views(version):
    fake = _fakes(version)
    fake["inp"] = FakeGPUArray(fake["inp"].shape, np.float32, fake["inp"].gpudata + 4)
    assert _call(version, fake).N == 6


@pytest.mark.parametrize("offset", [1, 2, 3])
@pytest.mark.parametrize("name", ["dout", "inp", "weight", "rstd", "dinp", "dweight"])
@pytest.mark.parametrize("version", FP32_VERSIONS)
def test_fp32_versions_refuse_views_off_their_element_size(version, name, offset):
    fake = _fakes(version)
    fake[name] = FakeGPUArray(fake[name].shape, np.float32, fake[name].gpudata + offset)
    with pytest.raises(ValueError,
                       match=rf"{name} must start on a 4-byte boundary for {version} \(its element "
                                         rf"size\); its address ends in {offset:#x}$"):
        _call(version, fake)


# --------------------------------------------------------------------------------------------------
# C rules


@pytest.mark.parametrize("C", [1, 4, 12, 100, 777, 1604])
@pytest.mark.parametrize("version", VECTOR_VERSIONS)
def test_C_not_a_multiple_of_8_refused(version, C):
    spec = rl.ladder.get(version)
    p = _arrays(version, 3, C)
    with pytest.raises(ValueError,
                       match=rf"{version} needs C to be a multiple of {spec.c_multiple} \(128-bit "
                                         rf"loads of {spec.c_multiple} values\), got C={C}"):
        _call(version, p)
    with pytest.raises(ValueError, match=rf"needs C to be a multiple of {spec.c_multiple}"):
        _call(version, _fakes(version, 3, C))


@pytest.mark.parametrize("version", FP32_VERSIONS)
def test_fp32_versions_take_any_C(version):
    for C in (1, 3, 777):
        assert _call(version, _arrays(version, 3, C)).C == C


@pytest.mark.parametrize("version", ALL)
def test_C_zero_refused(version):
    p = {k: np.zeros((4, 0) if k in ("dout", "inp", "dinp") else (0,) if k in ("weight", "dweight")
                     else (4,),
                     np.float32 if k == "rstd" else rl.ladder.get(version).dtype)
         for k in ("dout", "inp", "weight", "rstd", "dinp", "dweight")}
    with pytest.raises(ValueError, match=r"C \(the last dim of inp\) must be at least 1, got 0"):
        _call(version, p)


def test_N_at_2_31_refused():
    N = 2**31
    fakes = _fakes("v6_last_block", N, 8)
    with pytest.raises(ValueError,
                       match=r"N \(rows\) must be below 2\*\*31 \(kernels take it as int\), got "
                             r"2147483648"):
        _call("v6_last_block", fakes)
    assert _call("v6_last_block", _fakes("v6_last_block", N - 1, 8)).N == N - 1


# --------------------------------------------------------------------------------------------------
# N == 0 and what run() refuses before touching a GPU


@pytest.mark.parametrize("version", ALL)
def test_N_zero_is_a_no_op_that_leaves_outputs_untouched(version):
    spec = rl.ladder.get(version)
    C = 8 * spec.c_multiple
    p = _arrays(version, 0, C)
    dinp0 = np.zeros((0, C), spec.dtype)
    dweight0 = bf16.to_bf16(np.arange(C)).astype(spec.dtype)
    keep = dweight0.copy()
    dinp, dweight = rl.run(version, p["dout"], p["inp"], p["weight"], p["rstd"], dinp0,
                                dweight0)
    assert dinp.shape == (0, C)
    assert np.array_equal(np.asarray(dweight, np.float32), np.asarray(keep, np.float32))
    assert np.array_equal(np.asarray(dweight0, np.float32), np.asarray(keep, np.float32))
    dinp, dweight = rl.run(version, p["dout"], p["inp"], p["weight"], p["rstd"])
    assert dinp.shape == (0, C) and not np.any(np.asarray(dweight, np.float32))
    # (B, 0, C) too
    q = _arrays(version, 0, C, shape=(3, 0, C))
    dinp, _ = rl.run(version, q["dout"], q["inp"], q["weight"], q["rstd"])
    assert dinp.shape == (3, 0, C)
    # GPUArrays: the very same objects come back
    fakes = _fakes(version, 0, C)
    out = rl.run(version, fakes["dout"], fakes["inp"], fakes["weight"], fakes["rstd"],
                      fakes["dinp"],
                      fakes["dweight"])
    assert out[0] is fakes["dinp"] and out[1] is fakes["dweight"]
    assert "N == 0" in rl.run.__doc__


@pytest.mark.parametrize("version", ["v2_warp", "v6_last_block"])
def test_N_zero_with_gpuarrays_as_pycuda_makes_them(version):
    fakes = _fakes(version, 0, 16)
    # size 0: PyCUDA allocates nothing and keeps gpudata None
    for k in ("dout", "inp", "rstd", "dinp"):
        fakes[k] = FakeGPUArray(fakes[k].shape, fakes[k].dtype, address=None)
    out = rl.run(version,
                      *[fakes[k] for k in ("dout", "inp", "weight", "rstd", "dinp", "dweight")])
    assert out[0] is fakes["dinp"] and out[1] is fakes["dweight"]


def test_run_refuses_before_touching_the_gpu(monkeypatch):
    monkeypatch.setattr(gpu, "require", lambda: pytest.fail("GPU touched"))
    p = _arrays("v6_last_block", 4, 12)
    with pytest.raises(ValueError, match=r"v6_last_block needs C to be a multiple of 8"):
        rl.run("v6_last_block", p["dout"], p["inp"], p["weight"], p["rstd"])
    with pytest.raises(ValueError,
                       match=r"overwrite=True \(dinp = instead of \+=\) is not offered by "
                             r"v1_naive"):
        q = _arrays("v1_naive")
        rl.run("v1_naive", q["dout"], q["inp"], q["weight"], q["rstd"], overwrite=True)
    fakes = _fakes("v6_last_block")
    with pytest.raises(ValueError, match=r"dinp and dweight must be given as GPUArrays"):
        rl.run("v6_last_block", fakes["dout"], fakes["inp"], fakes["weight"], fakes["rstd"])


# --------------------------------------------------------------------------------------------------
# on the GPU


@pytest.mark.gpu
def test_misaligned_real_gpuarray_view_refused():
    from pycuda import gpuarray

    N, C = 4, 16
    p = _arrays("v6_last_block", N, C)
    dev = {k: gpuarray.to_gpu(np.ascontiguousarray(v)) for k, v in p.items()}
    big = gpuarray.to_gpu(np.zeros(N * C + 8, bf16.bfloat16))
    view = big[1:1 + N * C].reshape(N, C)  # 2 bytes past a 16-byte boundary
    assert int(view.gpudata) % 16 == 2
    with pytest.raises(ValueError,
                       match=r"inp must start on a 16-byte boundary for v6_last_block \(128-bit "
                             r"loads\)"):
        rl.run("v6_last_block", dev["dout"], view, dev["weight"], dev["rstd"], dev["dinp"],
                    dev["dweight"])
    aligned = big[8:8 + N * C].reshape(N, C)  # 16 bytes in: accepted
    assert int(aligned.gpudata) % 16 == 0
    aligned.set(np.ascontiguousarray(p["inp"]))
    rl.run("v6_last_block", dev["dout"], aligned, dev["weight"], dev["rstd"], dev["dinp"],
                dev["dweight"])
    want = reference.backward(p["dout"], p["inp"], p["weight"], p["rstd"], p["dinp"], p["dweight"])
    a, b = compare_both("v6_last_block", N, (dev["dinp"].get(), dev["dweight"].get()), want,
                   label="aligned view")
    assert a.ok and b.ok, f"{a}\n{b}"


@pytest.mark.gpu
def test_real_non_contiguous_gpuarray_refused():
    from pycuda import gpuarray

    p = _arrays("v2_warp", 8, 32)
    dev = {k: gpuarray.to_gpu(np.ascontiguousarray(v)) for k, v in p.items()}
    wide = gpuarray.to_gpu(np.zeros((8, 64), np.float32))
    try:
        view = wide[:, ::2]
        contiguous = view.flags.c_contiguous
    except (NotImplementedError, ValueError, IndexError, AttributeError) as exc:
        pytest.skip(f"this PyCUDA cannot make a strided 2-d view: {exc}")
    assert not contiguous
    with pytest.raises(ValueError, match=r"inp must be C-contiguous"):
        rl.run("v2_warp", dev["dout"], view, dev["weight"], dev["rstd"], dev["dinp"],
                    dev["dweight"])


@pytest.mark.gpu
@pytest.mark.parametrize("version", ALL)
def test_nan_and_inf_propagate_like_the_reference(version):
    import rmsnorm_lessons as rl

    spec = rl.ladder.get(version)
    N, C = 300, 776 if spec.c_multiple > 1 else 777
    p = reference.random_problem(N, C, spec.dtype, seed=99)
    # poison after rstd was computed: a NaN and an Inf in inp, a NaN and a -Inf in dout, each in its
    # own row and column
    p["inp"][3, 5] = np.nan
    p["inp"][100, 17] = np.inf
    p["dout"][200, 300] = np.nan
    p["dout"][299, 700] = -np.inf
    args = (p["dout"], p["inp"], p["weight"], p["rstd"], p["dinp"], p["dweight"])
    dinp, dweight = rl.run(version, *args)  # must come back: no hang, no crash
    with np.errstate(invalid="ignore"):  # inf - inf in the reference, as on the device
        ref_dinp, ref_dweight = reference.backward(*args)
        report = compare.compare_outputs(spec, N, (dinp, dweight), (ref_dinp, ref_dweight),
                                       name=version)
    for name, got, ref in (("dinp", dinp, ref_dinp), ("dweight", dweight, ref_dweight)):
        g = np.asarray(got, np.float64)
        bad_ref = ~np.isfinite(ref)
        assert bad_ref.any()
        print(f"{version} {name}: {int(bad_ref.sum())} non-finite in the reference, "
              f"{int((~np.isfinite(g)).sum())} in the result")
        assert np.array_equal(~np.isfinite(g),
                              bad_ref), f"{name}: non-finite elements differ from the reference"
        assert np.array_equal(np.isnan(g),
                              np.isnan(ref)), f"{name}: NaN elements differ from the reference"
        assert getattr(report, name).ok, str(getattr(report, name))
    # and the device is still fine afterwards
    q = reference.random_problem(64, 256, spec.dtype, seed=7)
    out = rl.run(version, q["dout"], q["inp"], q["weight"], q["rstd"], q["dinp"], q["dweight"])
    want = reference.backward(q["dout"], q["inp"], q["weight"], q["rstd"], q["dinp"], q["dweight"])
    assert compare.compare_outputs(spec, 64, out, want).dinp.ok
    rl.gpu.synchronize()
