"""v7_fast on the GPU: the overwrite mode, every launch shape and launch variant against the
float64 reference, wide rows bitwise twice, and the resident clusters the plan saves against the
driver's count.
"""
import ctypes

import numpy as np
import pytest

import rmsnorm_lessons as rl
from rmsnorm_lessons.core import bf16, build, compare, gpu, ladder, launch, libcuda, reference
from rmsnorm_lessons.core.ladder import v7_fast
from rmsnorm_lessons.core.ladder.v7_fast import Config, row_layout

V7 = rl.ladder.get("v7_fast")


def args(launch_):
    return dict(launch_.args)




# --------------------------------------------------------------------------------------------------
# on the GPU


def _gradient(p, overwrite):
    return reference.backward(p["dout"], p["inp"], p["weight"], p["rstd"],
                              None if overwrite else p["dinp"],
                              p["dweight"])


def _ok(N, got, want):
    report = compare.compare_outputs(V7, N, got, want, name="v7_fast")
    assert report.ok, str(report)


@pytest.mark.gpu
@pytest.mark.parametrize("N,C",
                         [(1, 8), (7, 776), (1031, 1024), (129, 1600), (513, 5120), (65, 16384)])
def test_overwrite_mode_sets_dinp_and_adds_dweight(N, C):
    p = reference.random_problem(N, C, bf16.bfloat16, seed=N + C, accumulate=True)
    poisoned = np.full((N, C), np.nan, np.float32).astype(bf16.bfloat16)  # never read in this mode
    got = rl.run(V7, p["dout"], p["inp"], p["weight"], p["rstd"], poisoned, p["dweight"],
                      overwrite=True)
    assert np.isfinite(np.asarray(got[0], np.float32)).all()
    _ok(N, got, _gradient(p, overwrite=True))
    # again, from its own outputs: dinp is the same gradient (bitwise), dweight took a second one
    again = rl.run(V7, p["dout"], p["inp"], p["weight"], p["rstd"], got[0], got[1],
                        overwrite=True)
    assert np.array_equal(bf16.bits(again[0]), bf16.bits(got[0]))
    _, grad_w = reference.backward(p["dout"], p["inp"], p["weight"], p["rstd"])
    want_w = p["dweight"].astype(np.float64) + 2 * grad_w
    tol = compare.tolerances(bf16.bfloat16, N)
    assert compare.compare(again[1], want_w, 2 * tol["dweight"][0], tol["dweight"][1],
                         name="dweight").ok


@pytest.mark.gpu
@pytest.mark.parametrize("C", [8, 264, 768, 1600, 4096, 5120, 8192, 16384])
@pytest.mark.parametrize("overwrite", [False, True])
def test_every_launch_shape_against_the_reference(C, overwrite):
    N = max(3, min(4099, (1 << 23) // C) | 1)  # odd; N*C up to 8 M
    p = reference.random_problem(N, C, bf16.bfloat16, seed=C * 3 + overwrite, accumulate=True)
    want = _gradient(p, overwrite)
    got = rl.run(V7, p["dout"], p["inp"], p["weight"], p["rstd"], p["dinp"], p["dweight"],
                      overwrite=overwrite)
    _ok(N, got, want)
    main = launch.launcher(V7, C, overwrite=overwrite).plan(N)[0]  # the launcher run() used
    staged = v7_fast.STAGED_C[0] <= C <= v7_fast.STAGED_C[1]
    # the default: rows staged by cp.async, in the layout staged_layout gives this device
    if staged:
        t = v7_fast.staged_layout(C, overwrite, gpu.facts().shared_memory_per_block_optin)
        assert main.kernel == "rmsnorm_backward_v7_staged"
        got = (args(main)["G"], args(main)["stages"], main.block, main.shared)
        assert got == (t.group, t.stages, t.block, t.shared)
        # and the register path at the same C, which Config(staged=False) asks for
        registers = v7_fast.Config(staged=False)
        _ok(N, rl.run(V7, p["dout"], p["inp"], p["weight"], p["rstd"], p["dinp"], p["dweight"],
                           overwrite=overwrite, config=registers), want)
        main = launch.launcher(V7, C, overwrite=overwrite, config=registers).plan(N)[0]
    s = row_layout(C, overwrite=overwrite)  # the register path ran the layout this file expects
    assert main.kernel == "rmsnorm_backward_v7"
    got = (args(main)["G"], args(main)["K"], args(main)["prefetch"])
    assert got == (s.group, s.K, int(s.prefetch))
    assert s.prefetch == (not overwrite and 1024 <= C <= 8192)
    assert main.block == s.block and main.shared == s.smem <= ladder.shared_memory(V7, C)


def _run(p, config=None, block=None):
    """One call from ``p``'s inputs and outputs, with a variant; returns (dinp, dweight) as NumPy
    arrays."""
    return rl.run(V7, p["dout"], p["inp"], p["weight"], p["rstd"], p["dinp"], p["dweight"],
                       config=config, block_size=block)


@pytest.mark.gpu
@pytest.mark.parametrize("variant", [dict(K=1), dict(K=2), dict(K=3), dict(K=4), dict(block=256),
                                     dict(block=128), dict(block=256, per_sm=1),
                                     dict(prefetch=False),
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
        rl.run(V7, p["dout"], p["inp"], p["weight"], p["rstd"])


@pytest.mark.gpu
@pytest.mark.parametrize("N,C",
                         [(67, 16392), (40, 32768), (5, 40000), (33, 65536), (21, 65528),
                          (1, 65536)])
@pytest.mark.parametrize("overwrite", [False, True])
def test_wide_rows_against_the_reference_bitwise_twice(N, C, overwrite):
    p = reference.random_problem(N, C, bf16.bfloat16, seed=N + C, accumulate=True)
    report = compare.check_version(V7, N, C, seed=N + C + 3, overwrite=overwrite)
    assert report.ok, report
    runs = [rl.run(V7, p["dout"], p["inp"], p["weight"], p["rstd"], p["dinp"], p["dweight"],
                        overwrite=overwrite) for _ in range(2)]
    for a, b in zip(*runs):
        assert np.array_equal(bf16.bits(a), bf16.bits(b))


@pytest.mark.gpu
@pytest.mark.parametrize("cluster", v7_fast.WIDE_CLUSTERS)
def test_the_saved_resident_clusters_are_what_the_driver_says(cluster):
    """The plan's figure (gpu.facts().resident_clusters: the driver's answer for a whole-SM probe
    kernel) against cuOccupancyMaxActiveClusters on this GPU for v7's own wide kernel (loaded again
    through the driver API: PyCUDA's Function hides its handle); on an H200, also the saved
    figure."""
    f = gpu.facts()
    if tuple(f.compute_capability) < (9, 0):
        pytest.skip(f"clusters need sm_90; this is {f.name}, {f.arch}")
    lib = ctypes.CDLL("libcuda.so.1")
    cubin = build.compile_file("v7_fast", f.arch).binary
    module, function, count = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_int(0)
    with gpu.in_context():
        assert lib.cuModuleLoadData(ctypes.byref(module), ctypes.c_char_p(cubin)) == 0
        try:
            name = f"rmsnorm_backward_v7_wide{cluster}".encode()
            assert lib.cuModuleGetFunction(ctypes.byref(function), module, name) == 0
            w = v7_fast.wide_layout(cluster * 16384, False, f.shared_memory_per_block_optin)
            assert lib.cuFuncSetAttribute(
                function, libcuda.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                ctypes.c_int(w.shared)) == 0
            config = libcuda.LaunchConfig(cluster * f.multiprocessors, 1, 1, w.block, 1, 1,
                                          w.shared, None, None, 0)
            assert lib.cuOccupancyMaxActiveClusters(ctypes.byref(count), function,
                                                    ctypes.byref(config)) == 0
        finally:
            lib.cuModuleUnload(module)
    print(f"clusters of {cluster}: the driver runs {count.value} at once")
    assert dict(f.resident_clusters)[cluster] == count.value
    if f.name == gpu.H200.name:
        assert dict(gpu.H200.resident_clusters)[cluster] == count.value
