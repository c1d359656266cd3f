"""compare.compare (CPU): the seed's rule |gpu - ref| <= tol + |ref| * eps, worst elements, NaN and
Inf."""
import numpy as np
import pytest

from rmsnorm_lessons.core import bf16, compare

TOL, EPS = 1e-3, 1e-2


def _ref(shape=(6, 50), seed=0):
    return np.random.default_rng(seed).uniform(-3, 3, shape)


def _allowed(ref):
    return TOL + np.abs(ref) * EPS


def test_passes_inside_the_rule():
    ref = _ref()
    sign = np.where(np.arange(ref.size).reshape(ref.shape) % 2, 1.0, -1.0)
    gpu = ref + sign * 0.999 * _allowed(ref)
    c = compare.compare(gpu, ref, TOL, EPS, name="dinp")
    assert c.ok and c.failures == 0 and c.worst == []
    assert c.checked == ref.size
    assert c.max_abs_error == pytest.approx(np.max(0.999 * _allowed(ref)))
    assert str(c).startswith("dinp: OK")


def test_exact_result():
    ref = _ref()
    c = compare.compare(ref.copy(), ref, TOL, EPS)
    assert c.ok and c.max_abs_error == 0 and c.rel_l2_error == 0


def test_fails_just_outside_the_rule():
    ref = _ref()
    gpu = ref.copy()
    gpu[2, 7] += 1.01 * _allowed(ref)[2, 7]
    c = compare.compare(gpu, ref, TOL, EPS, name="dweight")
    assert not c.ok and c.failures == 1
    (idx, g, r, err, allowed), = c.worst
    assert idx == (2, 7) and g == gpu[2, 7] and r == ref[2, 7]
    assert err > allowed == pytest.approx(_allowed(ref)[2, 7])
    text = str(c)
    assert text.startswith("dweight: FAIL  1/300 outside") and "at (2, 7)" in text


def test_reports_the_worst_indices_first():
    ref = _ref((4, 10))
    gpu = ref.copy()
    excess = {(0, 1): 2.0, (3, 9): 50.0, (1, 0): 5.0, (2, 2): 1.5, (2, 3): 9.0,
              (0, 0): 3.0, (1, 1): 7.0}
    for idx, factor in excess.items():
        gpu[idx] += factor * _allowed(ref)[idx] + 1.0
    c = compare.compare(gpu, ref, TOL, EPS, worst=3)
    assert c.failures == len(excess) and not c.ok
    # ranked by how far past the allowance: |err| - allowed
    by_excess = sorted(excess, key=lambda i: -(abs(gpu[i] - ref[i]) - _allowed(ref)[i]))
    assert [w[0] for w in c.worst] == by_excess[:3]
    assert c.worst[0][0] == (3, 9)


def test_one_dimensional_indices():
    ref = _ref((100,))
    gpu = ref.copy()
    gpu[42] = 1e6
    c = compare.compare(gpu, ref, TOL, EPS)
    assert [w[0] for w in c.worst] == [(42,)]


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_result_where_reference_is_finite_fails(bad):
    ref = _ref()
    gpu = ref.copy()
    gpu[1, 1] = bad
    c = compare.compare(gpu, ref, TOL, EPS)
    assert not c.ok and c.failures == 1
    assert c.worst[0][0] == (1, 1)
    assert not np.isfinite(c.max_abs_error) and not np.isfinite(c.rel_l2_error)
    str(c)  # printable


def test_non_finite_reference_is_skipped():
    ref = _ref()
    ref[0, 0], ref[1, 2], ref[5, 49] = np.nan, np.inf, -np.inf
    gpu = ref.copy()
    # anything goes where the reference is not finite
    gpu[0, 0], gpu[1, 2], gpu[5, 49] = 123.0, np.nan, 0.0
    c = compare.compare(gpu, ref, TOL, EPS)
    assert c.ok and c.checked == ref.size - 3
    assert np.isfinite(c.max_abs_error) and c.max_abs_error == 0


def test_relative_l2_error():
    ref = np.array([3.0, 4.0])
    gpu = np.array([3.0, 4.5])
    c = compare.compare(gpu, ref, 1.0, 0.0)
    assert c.rel_l2_error == pytest.approx(0.5 / 5.0)
    assert c.max_abs_error == pytest.approx(0.5)


def test_bf16_results_are_compared_as_values():
    ref = np.array([1.0, -2.0, 0.3])
    gpu = bf16.to_bf16(ref)
    c = compare.compare(gpu, ref, 0.0, compare.BF16_EPS)
    assert c.ok and c.max_abs_error > 0  # 0.3 is not a bf16


def test_shape_mismatch_refused():
    with pytest.raises(ValueError,
                       match=r"dinp: the result has shape \(2, 3\) but the reference has \(3, 2\)"):
        compare.compare(np.zeros((2, 3)), np.zeros((3, 2)), TOL, EPS, name="dinp")


def test_tolerances_are_the_seeds():
    fp32 = compare.tolerances(np.float32, 8192)
    assert fp32 == {"dinp": (1e-3, compare.FLT_EPSILON), "dweight": (1e-3, compare.FLT_EPSILON)}
    b = compare.tolerances(bf16.bfloat16, 100)
    assert b == {"dinp": (0.1, 0.079), "dweight": (0.5, 0.079)}
    # dweight's absolute tolerance grows as N**1.5 past the seed's N; dinp's does not
    big = compare.tolerances(bf16.bfloat16, 4 * 8192)
    assert big["dweight"] == (4.0, 0.079) and big["dinp"] == (0.1, 0.079)


# --------------------------------------------------------------------------------------------------
# compare_outputs: the one comparison of (dinp, dweight) with the reference


def _pair(N=6, C=50, seed=1):
    rng = np.random.default_rng(seed)
    return rng.uniform(-3, 3, (N, C)), rng.uniform(-3, 3, C)


@pytest.mark.parametrize("what", [np.dtype(np.float32), bf16.bfloat16, np.float32])
def test_compare_outputs_takes_a_dtype(what):
    ref = _pair()
    report = compare.compare_outputs(what, 6, ref, ref, name="mine")
    assert report.ok and report.version == "mine" and (report.N, report.C) == (6, 50)
    tol = compare.tolerances(what, 6)
    assert (report.dinp.tol, report.dinp.eps) == tol["dinp"]
    assert (report.dweight.tol, report.dweight.eps) == tol["dweight"]
    assert report.dinp.name == "dinp" and report.dweight.name == "dweight"


def test_compare_outputs_takes_a_rung():
    from rmsnorm_lessons.core import ladder

    ref = _pair()
    for version in ("v1_naive", "v6_last_block"):
        rung = ladder.get(version)
        report = compare.compare_outputs(rung, 3 * 8192, ref, ref)
        assert report.ok
        tol = compare.tolerances(rung.dtype, 3 * 8192)
        assert (report.dweight.tol, report.dweight.eps) == tol["dweight"]  # the dtype's, at this N


def test_compare_outputs_takes_a_version_name():
    ref = _pair()
    for version in ("v1_naive", "v6_last_block"):
        report = compare.compare_outputs(version, 6, ref, ref)
        assert report.ok and (report.dinp.tol, report.dinp.eps) == compare.tolerances(
            np.float32 if version == "v1_naive" else bf16.bfloat16, 6)["dinp"]
    with pytest.raises(ValueError, match=r"version must be one of"):
        compare.compare_outputs("float32", 6, ref, ref)  # a string names a version


def test_compare_outputs_reports_each_tensor():
    ref = _pair()
    got = (ref[0].copy(), ref[1].copy())
    got[1][7] += 10.0
    report = compare.compare_outputs(bf16.bfloat16, 6, got, ref, name="v9")
    assert report.dinp.ok and not report.dweight.ok and not report.ok
    assert report.dweight.worst[0][0] == (7,)
    text = str(report)
    assert text.startswith("v9 N=6 C=50\n") and "dinp: OK" in text and "dweight: FAIL" in text
    report = compare.compare_outputs(bf16.bfloat16, 6, got, ref, C=49)
    assert report.C == 49  # (as given)


def test_compare_bounded_takes_a_bound_per_element_and_says_so():
    ref = _ref((3, 4))
    allowed = np.full(ref.shape, 1e-3)
    allowed[1, 2] = 1.0
    gpu = ref.copy()
    gpu[1, 2] += 0.5  # inside its own bound
    c = compare.compare_bounded(gpu, ref, allowed, name="dinp")
    assert c.ok and "rounding bound" in str(c)
    gpu[0, 0] += 0.01  # outside its own
    c = compare.compare_bounded(gpu, ref, allowed, name="dinp")
    assert not c.ok and c.failures == 1 and c.worst[0][0] == (0, 0)
    # the seed's rule is the same comparison with tol + |ref| * eps
    assert f"|err| <= {TOL:g} + |ref|*{EPS:g}" in str(compare.compare(ref, ref, TOL, EPS))


def test_inputs_are_made_once_and_give_both_modes_references(monkeypatch):
    made = []
    real = compare.reference.random_problem
    monkeypatch.setattr(compare.reference, "random_problem",
                        lambda *a, **k: made.append(a) or real(*a, **k))
    inputs = compare.Inputs(5, 24, np.float32, seed=3)
    p = inputs.problem
    acc = compare.reference.backward(p["dout"], p["inp"], p["weight"], p["rstd"], p["dinp"],
                                   p["dweight"])
    over = compare.reference.backward(p["dout"], p["inp"], p["weight"], p["rstd"], None,
                                    p["dweight"])
    for want, got in ((acc, inputs.reference()), (over, inputs.reference(overwrite=True))):
        np.testing.assert_allclose(got[0], want[0], rtol=0, atol=0)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-14)
    assert inputs.reference() is inputs.reference() and len(made) == 1
    alone = compare.reference.backward(p["dout"], p["inp"], p["weight"], p["rstd"])
    got = inputs.gradient()
    np.testing.assert_allclose(got[0], alone[0], rtol=0, atol=0)
    np.testing.assert_allclose(got[1], alone[1], rtol=1e-14)
    # the gradient alone differs from both modes' dweight (they add the starting dweight)
    assert not np.allclose(got[1], inputs.reference(overwrite=True)[1])
    assert inputs.gradient() is got and len(made) == 1


def test_check_version_refuses_inputs_of_another_shape_before_any_launch(monkeypatch):
    monkeypatch.setattr(compare, "run", lambda *a, **k: pytest.fail("launched"))
    inputs = compare.Inputs(5, 24, np.float32)
    with pytest.raises(ValueError, match="inputs are for 5x24 float32, not the 5x32 float32"):
        compare.check_version("v2_warp", 5, 32, inputs=inputs)
    with pytest.raises(ValueError, match="not the 5x24 bfloat16 of v4"):
        compare.check_version("v4_vec_bf16", 5, 24, inputs=inputs)


@pytest.mark.parametrize("bound", ["seed", "scalar", "array"])
def test_a_comparison_in_blocks_is_the_comparison_in_one(monkeypatch, bound):
    rng = np.random.default_rng(5)
    ref = rng.standard_normal((61, 37))
    got = ref + rng.standard_normal(ref.shape) * 1e-3
    got.flat[[3, 500, 2000]] = [np.nan, np.inf, got.flat[2000] + 1.0]
    ref.flat[[4, 900]] = [np.inf, np.nan]

    def run():
        if bound == "seed":
            return compare.compare(got, ref, 1e-3, 1e-2, "x")
        if bound == "scalar":
            return compare.compare_bounded(got, ref, 2e-3, "x")
        return compare.compare_bounded(got, ref, np.abs(ref) * 1e-2 + 1e-4, "x", worst=4)

    whole = run()
    monkeypatch.setattr(compare, "BLOCK", 97)  # 24 blocks, the last one short
    blocks = run()
    assert whole.failures > 3 and not whole.ok
    # (repr: the worst elements hold NaN, which equals nothing)
    assert (blocks.ok, blocks.checked, blocks.failures, repr(blocks.worst),
            blocks.max_abs_error) == (whole.ok, whole.checked, whole.failures, repr(whole.worst),
                                      whole.max_abs_error)
    assert str(blocks) == str(whole)
