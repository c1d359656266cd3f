"""Every shipped rung v1..v6 on the CPU twin gives the float64 reference's answer within the check's
rounding bound (rmsnorm_lessons.core.compare.compare_strict), adding into random starting dinp and
dweight, with no hazard: at odd N, C not a multiple of 32 (of 8 where the rung needs whole 128-bit
chunks), N = 1, and on a GPU of 2 SMs, where every block of a persistent grid takes many rows.
v6_last_block is the seed's rmsnorm_backward_kernel10, re-derived (kernels/v6_last_block.cu).
"""
import dataclasses

import numpy as np
import pytest

from rmsnorm_lessons import twin
from rmsnorm_lessons.twin import scan
from rmsnorm_lessons.core import compare as check
from rmsnorm_lessons.core import build, gpu, ladder, reference

pytestmark = pytest.mark.skipif(twin.available() is not None, reason=str(twin.available()))

# the shipped rungs whose text the twin takes (v7's cp.async and clusters need a GPU)
def _twin_takes(rung) -> bool:
    stem, text, _ = build.kernel_text(rung)
    path = build.kernel_path(stem)
    return not scan.refusals(text, stem, build.included_files(text, path))


RUNGS = [r.name for r in ladder.SHIPPED if _twin_takes(r)]


def small_gpu(sms: int = 2):
    return dataclasses.replace(gpu.target_facts_or_fallback()[0], multiprocessors=sms)


def shapes(rung):
    odd_c = 777 - 777 % rung.c_multiple  # 777 in fp32, 776 where C must be a multiple of 8
    return [(129, odd_c, None), (1, rung.c_multiple if rung.c_multiple > 1 else 7, None),
            (301, 40, None), (203, 264, small_gpu())]


def _run(version, N, C, device, seed=1, **kw):
    rung = ladder.get(version)
    p = reference.random_problem(N, C, rung.dtype, seed=N + C, accumulate=True)
    got = twin.run_rung(rung, p["dout"], p["inp"], p["weight"], p["rstd"], p["dinp"],
                        p["dweight"], device=device, seed=seed, **kw)
    return p, got


@pytest.mark.parametrize("version", RUNGS)
def test_a_shipped_rung_matches_the_reference_on_the_cpu(version):
    rung = ladder.get(version)
    for N, C, device in shapes(rung):
        p, got = _run(version, N, C, device)
        assert got.hazards == [] and not got.stopped, (N, C, [str(h) for h in got.hazards])
        report = check.compare_strict(rung.dtype, p, (got.dinp, got.dweight), name=version)
        assert report.ok, f"{version} at N={N}, C={C}: {report}"
        # it added into the starting values: they are far from the gradient alone
        assert not np.allclose(got.dinp.astype(np.float64), p["dinp"].astype(np.float64))


def test_the_deterministic_rungs_give_the_same_bits_in_any_block_order():
    for version in ("v5_two_pass", "v6_last_block"):
        _, a = _run(version, 203, 264, small_gpu(3), seed=1)
        _, b = _run(version, 203, 264, small_gpu(3), seed=2)
        assert a.orders != b.orders, "the seeds gave the same block order"
        assert a.dinp.tobytes() == b.dinp.tobytes() and a.dweight.tobytes() == b.dweight.tobytes()


def test_hazard_tracking_off_gives_the_same_answer():
    p, on = _run("v3_smem", 129, 777, None, seed=0)
    _, off = _run("v3_smem", 129, 777, None, seed=0, hazards=False)
    assert off.hazards == [] and np.array_equal(on.dinp, off.dinp)
    assert check.compare_strict(np.float32, p, (off.dinp, off.dweight)).ok


def test_bad_input_is_refused_before_anything_runs():
    rung = ladder.get("v3_smem")
    p = reference.random_problem(4, 32, rung.dtype, seed=0)
    with pytest.raises(ValueError, match="weight must have shape"):
        twin.run_rung(rung, p["dout"], p["inp"], p["weight"][:7], p["rstd"])
    with pytest.raises(ValueError, match="calls must be"):
        twin.run_rung(rung, p["dout"], p["inp"], p["weight"], p["rstd"], calls=0)
    p = reference.random_problem(4, 36, rung.dtype, seed=0)
    with pytest.raises(ValueError, match="multiple of 8"):
        twin.run_rung("v4_vec_bf16", *(p[k] for k in ("dout", "inp", "weight", "rstd")))
