"""Every version against the float64 reference on the GPU (marker ``gpu``; skipped without a
device); v6 against the seed's own check, its counter back at zero, v4's accumulator as lesson 07
reads it."""
import numpy as np
import pytest
from _gpu_support import free, tensors, to_device

import rmsnorm_lessons as rl
from rmsnorm_lessons.core import bf16, compare, launch, reference

pytestmark = pytest.mark.gpu

# odd N, N = 1, C not a power of two; C % 8 == 0 where the bf16 versions need it
SHAPES = [(1, 8), (3, 24), (7, 776), (129, 1600), (1000, 2048), (4097, 768), (513, 5120)]


def _case(version, N, C, seed):
    spec = rl.ladder.get(version)
    p = reference.random_problem(N, C, spec.dtype, seed=seed)
    dinp, dweight = rl.run(version, p["dout"], p["inp"], p["weight"], p["rstd"], p["dinp"],
                                p["dweight"])
    ref = reference.backward(p["dout"], p["inp"], p["weight"], p["rstd"], p["dinp"], p["dweight"])
    report = compare.compare_outputs(spec, N, (dinp, dweight), ref, name=version)
    a, b = report.dinp, report.dweight
    print(f"{version} N={N} C={C}: dinp ||err||/||ref|| {a.rel_l2_error:.2e} max "
          f"{a.max_abs_error:.2e}; "
          f"dweight {b.rel_l2_error:.2e} max {b.max_abs_error:.2e}")
    return a, b


@pytest.mark.parametrize("N,C", SHAPES)
@pytest.mark.parametrize("version", rl.ladder.VERSIONS)
def test_version_matches_float64_reference(version, N, C):
    a, b = _case(version, N, C, seed=N * 7919 + C)
    assert a.ok, str(a)
    assert b.ok, str(b)


def test_v1_seed_shape():
    a, b = _case("v1_naive", 8 * 1024, 1024, seed=1)
    assert a.ok and b.ok, f"{a}\n{b}"


def test_forward_kernel_matches_reference():
    rng = np.random.default_rng(3)
    for N, C in [(1, 5), (33, 777), (1000, 1024)]:
        x = rng.uniform(-1, 1, (N, C)).astype(np.float32)
        w = rng.uniform(-1, 1, C).astype(np.float32)
        out, rstd = rl.forward(x, w)
        ref_out, ref_rstd = reference.forward(x, w)
        np.testing.assert_allclose(rstd, ref_rstd, rtol=1e-5)
        np.testing.assert_allclose(out, ref_out, rtol=1e-5, atol=1e-6)


def test_outputs_accumulate_not_overwrite():
    # running twice adds the gradient twice
    for version in rl.ladder.VERSIONS:
        spec = rl.ladder.get(version)
        p = reference.random_problem(64, 256, spec.dtype, seed=5, accumulate=False)
        once = rl.run(version, p["dout"], p["inp"], p["weight"], p["rstd"])
        twice = rl.run(version, p["dout"], p["inp"], p["weight"], p["rstd"], *once)
        np.testing.assert_allclose(np.asarray(twice[0], np.float32),
                                   2 * np.asarray(once[0], np.float32),
                                   rtol=0.02, atol=0.02)


@pytest.mark.parametrize("version", [v for v in rl.ladder.VERSIONS
                                     if rl.ladder.get(v).deterministic])
def test_deterministic_versions_are_bitwise_repeatable(version):
    spec = rl.ladder.get(version)
    p = reference.random_problem(4099, 1600, spec.dtype, seed=11)
    first = rl.run(version, p["dout"], p["inp"], p["weight"], p["rstd"], p["dinp"],
                        p["dweight"])
    for _ in range(19):
        again = rl.run(version, p["dout"], p["inp"], p["weight"], p["rstd"], p["dinp"],
                            p["dweight"])
        assert np.array_equal(bf16.bits(again[0]), bf16.bits(first[0]))
        assert np.array_equal(bf16.bits(again[1]), bf16.bits(first[1]))


def test_v6_many_launches_without_host_reset():
    # the ticket counter must come back to zero by itself after every launch: after 100 launches
    # with nothing reset on the host, one more launch from fresh outputs gives exactly the first
    # result
    spec = rl.ladder.get("v6_last_block")
    N, C = 1031, 1024
    p = reference.random_problem(N, C, spec.dtype, seed=13)
    expected = rl.run(spec, p["dout"], p["inp"], p["weight"], p["rstd"], p["dinp"],
                           p["dweight"])
    dev = to_device(p)
    # a fresh launcher: its own, freshly zeroed ticket counter
    L = launch.Launcher(launch.checked_call(spec, C))
    bufs = tensors(dev)
    for _ in range(100):
        L(N, bufs)
    rl.gpu.synchronize()
    after_100 = dev["dweight"].get().astype(np.float64)
    dev["dinp"].set(np.ascontiguousarray(p["dinp"]))
    dev["dweight"].set(np.ascontiguousarray(p["dweight"]))
    L(N, bufs)
    rl.gpu.synchronize()
    assert np.array_equal(bf16.bits(dev["dinp"].get()), bf16.bits(expected[0]))
    assert np.array_equal(bf16.bits(dev["dweight"].get()), bf16.bits(expected[1]))
    # and the 100 launches did add up: dweight moved by about 100 gradients
    _, grad = reference.backward(p["dout"], p["inp"], p["weight"], p["rstd"])
    moved = after_100 - p["dweight"].astype(np.float64)
    assert np.corrcoef(moved, grad)[0, 1] > 0.99
    L.free()
    free(dev)


def test_gpuarray_inputs_update_in_place():
    from pycuda import gpuarray

    for version in ("v2_warp", "v6_last_block"):
        spec = rl.ladder.get(version)
        p = reference.random_problem(77, 264, spec.dtype, seed=17)
        dev = {k: gpuarray.to_gpu(np.ascontiguousarray(p[k])) for k in p}
        out = rl.run(version, dev["dout"], dev["inp"], dev["weight"], dev["rstd"], dev["dinp"],
                          dev["dweight"])
        assert out[0] is dev["dinp"] and out[1] is dev["dweight"]
        ref = rl.run(version, p["dout"], p["inp"], p["weight"], p["rstd"], p["dinp"],
                          p["dweight"])
        assert np.array_equal(np.asarray(dev["dinp"].get(), np.float32),
                              np.asarray(ref[0], np.float32)) or version == "v2_warp"
        want = reference.backward(p["dout"], p["inp"], p["weight"], p["rstd"], p["dinp"],
                                  p["dweight"])
        report = compare.compare_outputs(spec, 77, (dev["dinp"].get(), dev["dweight"].get()), want)
        assert report.ok, str(report)
        free(dev)


# --- v6 and the seed's own check, v6's counter, v4's accumulator as lesson 07 reads it ------------


@pytest.mark.gpu
def test_v6_passes_the_seeds_own_check():
    from rmsnorm_lessons.core import compare, reference

    B, T, C = 8, 1024, 1024
    rng = np.random.default_rng(1)
    inp = rng.uniform(-1, 1, (B, T, C)).astype(np.float32)
    weight = rng.uniform(-1, 1, C).astype(np.float32)
    dout = rng.uniform(-1, 1, (B, T, C)).astype(np.float32)
    _, rstd = reference.forward(inp, weight, dtype=np.float32)
    ref_dinp, ref_dweight = reference.backward(dout, inp, weight, rstd, dtype=np.float32)
    dinp, dweight = rl.run("v6_last_block", *(bf16.to_bf16(a) for a in (dout, inp, weight)),
                                rstd)
    a = compare.compare(dinp, ref_dinp, 1e-1, 0.079, name="dinp")
    b = compare.compare(dweight, ref_dweight, 5e-1, 0.079, name="dweight")
    assert a.ok and b.ok, f"{a}\n{b}"


@pytest.mark.gpu
def test_v6_counter_reads_zero_after_every_launch():
    from rmsnorm_lessons.core import gpu, reference

    N, C = 1031, 1024
    p = reference.random_problem(N, C, bf16.bfloat16, seed=2)
    drv = gpu.driver()
    for _ in range(3):
        rl.run("v6_last_block", p["dout"], p["inp"], p["weight"], p["rstd"], p["dinp"],
                    p["dweight"])
        counter = np.ones(1, np.uint32)
        drv.memcpy_dtoh(counter, launch.launcher("v6_last_block", C).scratch("scratch"))
        assert counter[0] == 0


@pytest.mark.gpu
def test_v4_accumulator_readback_is_what_dweight_adds():
    # lesson 07 reads v4's fp32 sums from the launcher's scratch: they must be this call's sums
    from rmsnorm_lessons.core import gpu, reference

    N, C = 4099, 1600
    p = reference.random_problem(N, C, bf16.bfloat16, seed=3)
    _, dweight = rl.run("v4_vec_bf16", p["dout"], p["inp"], p["weight"], p["rstd"], p["dinp"],
                             p["dweight"])
    accum = np.empty(C, np.float32)
    gpu.driver().memcpy_dtoh(accum, launch.launcher("v4_vec_bf16", C).scratch("dweight_accum"))
    expect = bf16.to_bf16(bf16.from_bf16(p["dweight"]) + accum)
    assert np.array_equal(bf16.bits(dweight), bf16.bits(expect))
    _, grad = reference.backward(p["dout"], p["inp"], p["weight"], p["rstd"])
    np.testing.assert_allclose(accum, grad, rtol=1e-3, atol=1e-2)
