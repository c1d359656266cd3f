"""Determinism (GPU): deterministic versions give the same bits on every run; the others stay in
tolerance.

Every version whose ``Rung.deterministic`` is true must produce bitwise-identical dinp and dweight
over 20 runs from the same inputs, at shapes where many blocks contribute to every channel. For the
versions that add with atomics (float addition is not associative, so the order the hardware serves
them changes the last bits), the test measures how much dweight moves between runs, prints it, and
asserts that every run is still within the tolerance of the float64 reference.
"""
import numpy as np
import pytest
from _gpu_support import bits, compare_both, free, reference_of, tensors, to_device

import rmsnorm_lessons as rl
from rmsnorm_lessons.core import bf16, compare, launch, reference

pytestmark = pytest.mark.gpu

RUNS = 20
DETERMINISTIC = [v for v in rl.ladder.VERSIONS if rl.ladder.get(v).deterministic]
ATOMIC = [v for v in rl.ladder.VERSIONS if not rl.ladder.get(v).deterministic]


def _repeat(version, N, C, seed):
    """RUNS launches from the same inputs and initial outputs.

    Asserts that dinp (no atomics in any version: one warp or thread owns a row) has the same bits
    every time; returns the problem, the first run's (dinp, dweight) and every run's dweight.
    """
    spec = rl.ladder.get(version)
    p = reference.random_problem(N, C, spec.dtype, seed=seed)
    dev = to_device(p)
    L = launch.Launcher(launch.checked_call(spec, C))  # a launcher of its own: fresh scratch
    first, dweights = None, []
    try:
        for i in range(RUNS):
            dev["dinp"].set(np.ascontiguousarray(p["dinp"]))
            dev["dweight"].set(np.ascontiguousarray(p["dweight"]))
            L(N, tensors(dev))
            rl.gpu.synchronize()
            dinp = dev["dinp"].get()
            dweights.append(dev["dweight"].get())
            if first is None:
                first = (dinp, dweights[0])
            else:
                assert np.array_equal(bits(dinp),
                                      bits(first[0])), f"run {i}: dinp differs from run 0"
    finally:
        L.free()
        free(dev)
    return p, first, dweights


@pytest.mark.parametrize("N,C", [(4099, 1600), (70000, 768), (1, 5120)])
@pytest.mark.parametrize("version", DETERMINISTIC)
def test_deterministic_versions_are_bitwise_repeatable(version, N, C):
    p, first, dweights = _repeat(version, N, C, seed=N ^ C)
    for i, again in enumerate(dweights[1:], 1):
        assert np.array_equal(bits(again), bits(first[1])), f"run {i}: dweight differs from run 0"
    a, b = compare_both(version, N, first, reference_of(p), label=f"N={N} C={C}")
    assert a.ok and b.ok, f"{a}\n{b}"


@pytest.mark.parametrize("version", DETERMINISTIC)
def test_deterministic_through_run_with_host_arrays(version):
    # run() allocates fresh device buffers every call; the launcher (and its scratch) is cached
    spec = rl.ladder.get(version)
    p = reference.random_problem(2051, 2048, spec.dtype, seed=5)
    args = [p[k] for k in ("dout", "inp", "weight", "rstd", "dinp", "dweight")]
    first = rl.run(version, *args)
    for _ in range(RUNS - 1):
        again = rl.run(version, *args)
        assert np.array_equal(bits(again[0]), bits(first[0]))
        assert np.array_equal(bits(again[1]), bits(first[1]))


@pytest.mark.parametrize("version", ATOMIC)
def test_atomic_versions_vary_only_within_tolerance(version):
    N, C = 16384, 1024  # many blocks adding into every channel
    spec = rl.ladder.get(version)
    p, first, dweights = _repeat(version, N, C, seed=21)  # (asserts dinp is the same every run)
    ref = reference_of(p)
    tol, eps = compare.tolerances(spec.dtype, N)["dweight"]  # what compare_outputs allows dweight
    stack = np.stack([np.asarray(d, np.float64) for d in dweights])
    spread = stack.max(axis=0) - stack.min(axis=0)
    varied = int(np.count_nonzero(spread))
    distinct = len({bits(d).tobytes() for d in dweights})
    print(f"{version}: over {RUNS} runs dweight took {distinct} distinct values; {varied}/{C} "
          f"channels varied, "
          f"largest spread {spread.max():.3g} (|dweight| up to {np.abs(ref[1]).max():.3g}; "
          f"allowed error {tol:g} + |ref|*{eps:g})")
    for i, d in enumerate(dweights):
        c = compare.compare_outputs(spec, N, (first[0], d), ref, name=f"{version} run {i}")
        assert c.ok, str(c)
    assert np.all(spread <= tol + np.abs(ref[1]) * eps)


# --- v5's dweight, launched again and again (lesson 07) -------------------------------------------


@pytest.mark.gpu
def test_v5_dweight_is_bitwise_repeatable():
    from rmsnorm_lessons.core import reference

    p = reference.random_problem(4096, 1024, bf16.bfloat16, seed=4)
    first = rl.run("v5_two_pass", p["dout"], p["inp"], p["weight"], p["rstd"], p["dinp"],
                        p["dweight"])[1]
    for _ in range(4):
        again = rl.run("v5_two_pass", p["dout"], p["inp"], p["weight"], p["rstd"], p["dinp"],
                            p["dweight"])[1]
        assert np.array_equal(bf16.bits(again), bf16.bits(first))
