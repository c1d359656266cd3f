"""A C whose shared memory no GPU holds is refused by ``run`` before the GPU; one this device cannot
hold is refused by the launcher (here on the GPU; with a fake device in test_launch_math.py).
"""
import dataclasses

import pytest

import rmsnorm_lessons as rl
from rmsnorm_lessons.core import gpu, ladder, launch, reference

ALL = list(rl.ladder.VERSIONS)


def _arrays(version, N=6, C=16, seed=0):
    return reference.random_problem(N, C, rl.ladder.get(version).dtype, seed=seed)


OPTIN_H200 = 227 * 1024  # bytes a block may opt in to on Hopper


def _need(version, C, block=None):
    try:
        return ladder.shared_memory(version, C, block)
    except ValueError:
        return float("inf")


@pytest.mark.parametrize("version", ALL)
def test_the_largest_C_that_fits(version):
    spec = rl.ladder.get(version)
    for C in (spec.c_multiple * 8, 1600, 16384):
        if C % spec.c_multiple == 0 and _need(version, C) <= OPTIN_H200:
            assert launch.largest_c(spec, OPTIN_H200, spec.block_size) >= C
    largest = launch.largest_c(spec, OPTIN_H200, spec.block_size)
    assert largest % spec.c_multiple == 0
    assert _need(version, largest) <= OPTIN_H200
    if largest < 2**30:
        assert _need(version, largest + spec.c_multiple) > OPTIN_H200
    else:  # no shared memory that grows with C
        assert _need(version, 2**30) == 0
    if version == "v7_fast":
        # a row split over a cluster of at most 4 blocks
        assert largest == ladder.v7_fast.MAX_C == 65536
    print(f"{version}: largest C on an H200 {largest}")


def _capped_version(max_C=1024):
    """A version whose kernel cannot run past max_C, whatever the device (as v7_fast past 16384)."""
    def smem(C, block):
        if C > max_C:
            raise ValueError(f"v9_capped runs C up to {max_C}, got C={C}")
        return 4 * C

    return dataclasses.replace(ladder.get("v6_last_block"), name="v9_capped", shared_memory=smem)


def test_a_C_beyond_the_version_is_refused_before_the_gpu(monkeypatch):
    capped = _capped_version(1024)
    assert ladder.shared_memory(capped, 1024) == 4096
    assert launch.largest_c(capped, OPTIN_H200, 512) == 1024
    p = _arrays("v6_last_block", 2, 1032)
    monkeypatch.setattr(gpu, "require", lambda: pytest.fail("GPU touched"))
    with pytest.raises(ValueError, match=r"^v9_capped runs C up to 1024, got C=1032$"):
        rl.run(capped, p["dout"], p["inp"], p["weight"], p["rstd"])
    # check_inputs checks the arrays only; a C that only this device cannot hold passes it (the
    # launcher checks the device)
    assert rl.validate.inputs(capped, p["dout"], p["inp"], p["weight"], p["rstd"]).C == 1032
    p = _arrays("v6_last_block", 2, 32768)
    assert rl.validate.inputs("v6_last_block", p["dout"], p["inp"], p["weight"],
                                p["rstd"]).C == 32768


def test_v7_refuses_C_past_its_limit_without_a_gpu(monkeypatch):
    C = 65536 + 8
    p = _arrays("v7_fast", 2, C)
    monkeypatch.setattr(gpu, "require", lambda: pytest.fail("GPU touched"))
    with pytest.raises(ValueError,
                       match=rf"^v7_fast: C={C} is wider than 4 blocks of 512 threads hold; the "
                                         rf"largest C is 65536$"):
        rl.run("v7_fast", p["dout"], p["inp"], p["weight"], p["rstd"])


def test_shared_memory_depends_on_the_block_size():
    small = ladder.shared_memory("v6_last_block", 1024, 128)
    big = ladder.shared_memory("v6_last_block", 1024)
    assert small == (2 * 1024 + 2 * 96 * 4) * 4 < big
    assert launch.largest_c(ladder.get("v6_last_block"), OPTIN_H200, 128) > launch.largest_c(
        ladder.get("v6_last_block"), OPTIN_H200, 512)



@pytest.mark.gpu
@pytest.mark.parametrize("version", [v for v in ALL if _need(v, 1 << 17)])
def test_run_refuses_C_beyond_the_devices_shared_memory(version):
    import rmsnorm_lessons as rl

    spec = rl.ladder.get(version)
    limit = rl.gpu.facts().shared_memory_per_block_optin
    C = next((C for C in range(spec.c_multiple * 256, 1 << 20, spec.c_multiple * 256)
              if _need(version, C) > limit), None)
    if C is None:
        pytest.skip(f"{version} fits this device's shared memory at any C")
    p = _arrays(version, 1, C)
    # refused by the launcher against this device's limit, or before it where no GPU at all could
    # hold it (the H200's limit, 232448 bytes, is the largest any GPU gives a block:
    # validate.shared_memory)
    with pytest.raises(ValueError,
                       match=rf"^(C={C} needs \d+ bytes of dynamic shared memory per block for "
                                         rf"{version} \(\+ \d+ static\), more than this device "
                                         rf"allows \({limit} bytes\); the largest C it can run is "
                                         rf"\d+|v7_fast: C={C} is wider than 4 blocks of 512 "
                                         rf"threads hold; the largest C is 65536|{version} at "
                                         rf"C={C} needs \d+ bytes of dynamic shared memory per "
                                         r"block \(block of \d+\); no GPU allows a block more than "
                                         r"\d+ bytes)"):
        rl.run(version, p["dout"], p["inp"], p["weight"], p["rstd"], p["dinp"], p["dweight"])
