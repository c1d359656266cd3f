"""Launch hygiene (GPU): many launches without a host reset, two streams at once, errors named.

* 100 back-to-back launches of one Launcher with nothing reset on the host: whatever state a version
  keeps in its scratch (v6's and v7's ticket counters) must come back by itself, so a launch after
  them gives exactly the result of a first launch (for the deterministic versions; the others within
  tolerance).
* Two PyCUDA streams, interleaved, each on its own problem, through two Launchers and through one
  (which keeps scratch per stream): both right.
* A CUDA error raised by a launch (here: a plan asking for more threads than a block may have)
  becomes ``rl.launch.LaunchError`` naming the version and the kernel.
"""
import dataclasses

import numpy as np
import pytest
from _gpu_support import bits, compare_both, free, reference_of, tensors, to_device

import rmsnorm_lessons as rl
from rmsnorm_lessons.core import launch, reference

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("version", rl.ladder.VERSIONS)
def test_100_launches_without_host_reset(version):
    spec = rl.ladder.get(version)
    N, C = 1031, 1024
    p = reference.random_problem(N, C, spec.dtype, seed=13)
    dev = to_device(p)
    L = launch.Launcher(launch.checked_call(spec, C))  # fresh scratch
    bufs = tensors(dev)
    L(N, bufs)
    rl.gpu.synchronize()
    first = (dev["dinp"].get(), dev["dweight"].get())
    for _ in range(100):
        L(N, bufs)
    rl.gpu.synchronize()
    after = np.asarray(dev["dweight"].get(), np.float64)
    dev["dinp"].set(np.ascontiguousarray(p["dinp"]))
    dev["dweight"].set(np.ascontiguousarray(p["dweight"]))
    L(N, bufs)
    rl.gpu.synchronize()
    again = (dev["dinp"].get(), dev["dweight"].get())
    L.free()
    free(dev)
    if spec.deterministic:
        assert np.array_equal(bits(again[0]),
                              bits(first[0])), "dinp after 100 launches differs from the first"
        assert np.array_equal(bits(again[1]),
                              bits(first[1])), "dweight after 100 launches differs from the first"
    a, b = compare_both(version, N, again, reference_of(p), label="after 100 launches")
    assert a.ok and b.ok, f"{a}\n{b}"
    # the 100 launches did add up: dweight moved by about 100 gradients
    _, grad = reference.backward(p["dout"], p["inp"], p["weight"], p["rstd"])
    moved = after - np.asarray(first[1], np.float64)
    assert np.corrcoef(moved, grad)[0, 1] > 0.99
    # (a bf16 dweight rounds at every launch: only the correlation is asserted)
    if spec.dtype == np.float32:
        assert np.allclose(moved, 100 * grad, rtol=1e-3, atol=1e-3 * np.abs(100 * grad).max())


@pytest.mark.parametrize("shared", [False, True], ids=["two launchers", "one launcher"])
@pytest.mark.parametrize("version", rl.ladder.VERSIONS)
def test_two_streams(version, shared):
    drv = rl.gpu.driver()
    spec = rl.ladder.get(version)
    N, C = 8191, 2048
    problems = [reference.random_problem(N, C, spec.dtype, seed=s) for s in (31, 32)]
    devs = [to_device(p) for p in problems]
    one = launch.Launcher(launch.checked_call(spec, C))
    launchers = [one, one] if shared else [one, launch.Launcher(launch.checked_call(spec, C))]
    streams = [drv.Stream(), drv.Stream()]
    for _ in range(3):  # interleaved, so the two streams' kernels can overlap
        for L, d, s in zip(launchers, devs, streams):
            L(N, tensors(d), s)
    for s in streams:
        s.synchronize()
    for i, (p, d) in enumerate(zip(problems, devs)):
        want = reference_of(p)
        want = reference_of(p, *want)
        want = reference_of(p, *want)
        got = (d["dinp"].get(), d["dweight"].get())
        a, b = compare_both(version, 3 * N, got, want, label=f"stream {i}, 3 launches")
        assert a.ok and b.ok, f"{a}\n{b}"
        if spec.deterministic:
            # the same as three launches one after another on the default stream
            ref_dev = to_device(p)
            L = launch.Launcher(launch.checked_call(spec, C))
            for _ in range(3):
                L(N, tensors(ref_dev))
            rl.gpu.synchronize()
            assert np.array_equal(bits(got[0]), bits(ref_dev["dinp"].get()))
            assert np.array_equal(bits(got[1]), bits(ref_dev["dweight"].get()))
            L.free()
            free(ref_dev)
    for L in set(launchers):
        L.free()
    for d in devs:
        free(d)


def _plan_too_many_threads(monkeypatch, L, N):
    """From now on ``L`` plans N rows as it would, but with 2048 threads per block: more than any
    block may have, so the launch itself fails (the launcher's checks are not asked again)."""
    bad = [dataclasses.replace(step, block=2048) for step in L.plan(N)]
    monkeypatch.setattr(L, "plan", lambda n: bad)


def _still_runs(spec, p, label):
    """An invalid configuration is not sticky: the same version still runs, and is right."""
    rl.gpu.synchronize()
    got = rl.run(spec, p["dout"], p["inp"], p["weight"], p["rstd"], p["dinp"], p["dweight"])
    a, b = compare_both(spec, p["dout"].shape[0], got, reference_of(p), label=label)
    assert a.ok and b.ok


def _launch_fails(monkeypatch, spec, p):
    """A launcher's own launch with 2048 threads a block fails, naming the version and kernel."""
    N, C = p["dout"].shape
    dev = to_device(p)
    L = launch.Launcher(launch.checked_call(spec, C))
    _plan_too_many_threads(monkeypatch, L, N)
    with pytest.raises(rl.launch.LaunchError,
                       match=rf"^{spec.name}: launching {spec.kernels[0]} failed"):
        L(N, tensors(dev))
    rl.gpu.synchronize()
    L.free()
    free(dev)


@pytest.mark.parametrize("version", rl.ladder.VERSIONS)
def test_a_launch_error_names_the_version(version, monkeypatch):
    spec = rl.ladder.get(version)
    p = reference.random_problem(64, 256, spec.dtype, seed=3)
    _launch_fails(monkeypatch, spec, p)
    _still_runs(spec, p, "after a refused launch")


def test_run_reports_a_launch_error_with_the_version(monkeypatch):
    spec = rl.ladder.get("v2_warp")
    N, C = 50, 128
    p = reference.random_problem(N, C, spec.dtype, seed=4)
    L = launch.launcher(spec, C)  # the cached launcher run() uses
    _plan_too_many_threads(monkeypatch, L, N)
    with pytest.raises(rl.launch.LaunchError,
                       match=r"^v2_warp: launching rmsnorm_backward_v2 failed"):
        rl.run(spec, p["dout"], p["inp"], p["weight"], p["rstd"], p["dinp"], p["dweight"])
    monkeypatch.undo()
    _still_runs(spec, p, "after a launch error")


def test_too_many_threads_is_refused_or_a_launch_error(monkeypatch):
    spec = rl.ladder.get("v6_last_block")
    N, C = 64, 1024
    with pytest.raises(ValueError,
                       match=r"block_size for v6_last_block must be a multiple of 32 "
                             r"from 32 to 512"):
        # refused before anything is launched: the call's options are checked before a Launcher
        launch.Launcher(launch.checked_call(spec, C, block_size=2048))
    assert spec.kernels[0] == "rmsnorm_backward_v6"
    _launch_fails(monkeypatch, spec, reference.random_problem(N, C, spec.dtype, seed=6))
