"""The NumPy reference (CPU): float32 against float64, against finite differences, accumulation,
shapes."""
import numpy as np
import pytest

from rmsnorm_lessons.core import bf16, reference


def _problem(N, C, seed, dtype=np.float64):
    rng = np.random.default_rng(seed)
    inp = rng.uniform(-1, 1, (N, C)).astype(dtype)
    weight = rng.uniform(-1, 1, C).astype(dtype)
    dout = rng.uniform(-1, 1, (N, C)).astype(dtype)
    return dout, inp, weight


def _rel(a, b):
    return np.linalg.norm(np.asarray(a, np.float64) - b) / np.linalg.norm(b)


def test_forward_rstd_and_output_by_hand():
    x = np.array([[3.0, 4.0]])
    w = np.array([2.0, 0.5])
    out, rstd = reference.forward(x, w, eps=0.0)
    # mean(x^2) = 12.5
    assert rstd[0] == pytest.approx(1 / np.sqrt(12.5))
    np.testing.assert_allclose(out, x / np.sqrt(12.5) * w)


def test_backward_one_row_by_hand():
    # C = 2, everything written out: norm = x*r, dnorm = w*g, dinp = r*(dnorm -
    # norm*mean(dnorm*norm))
    x = np.array([[1.0, -2.0]])
    w = np.array([0.5, 3.0])
    g = np.array([[2.0, 1.0]])
    r = np.array([0.25])
    norm = x * 0.25
    dnorm = w * g
    m = np.mean(dnorm * norm)
    dinp, dweight = reference.backward(g, x, w, r)
    np.testing.assert_allclose(dinp, 0.25 * (dnorm - norm * m))
    np.testing.assert_allclose(dweight, (norm * g)[0])


def test_float32_reference_is_close_to_float64():
    p = reference.random_problem(257, 768, np.float32, seed=1)
    args = (p["dout"], p["inp"], p["weight"], p["rstd"], p["dinp"], p["dweight"])
    d32, w32 = reference.backward(*args, dtype=np.float32)
    d64, w64 = reference.backward(*args)
    assert d32.dtype == np.float32 and w32.dtype == np.float32
    assert d64.dtype == np.float64 and w64.dtype == np.float64
    assert _rel(d32, d64) < 1e-6
    assert _rel(w32, w64) < 1e-5
    # and they are not the same computation (float32 really rounds)
    assert not np.array_equal(d32.astype(np.float64), d64)


def test_backward_matches_finite_differences():
    dout, inp, weight = _problem(3, 7, seed=2)
    _, rstd = reference.forward(inp, weight)
    dinp, dweight = reference.backward(dout, inp, weight, rstd)
    fd_dinp, fd_dweight = reference.loss_gradients_fd(dout, inp, weight)
    np.testing.assert_allclose(dinp, fd_dinp, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(dweight, fd_dweight, rtol=1e-6, atol=1e-8)


def test_finite_differences_on_chosen_rows_and_cols():
    dout, inp, weight = _problem(5, 6, seed=3)
    _, rstd = reference.forward(inp, weight)
    dinp, _ = reference.backward(dout, inp, weight, rstd)
    fd, _ = reference.loss_gradients_fd(dout, inp, weight, rows=[0, 4], cols=[1, 5])
    np.testing.assert_allclose(fd, dinp[np.ix_([0, 4], [1, 5])], rtol=1e-6, atol=1e-8)


def test_backward_accumulates_into_nonzero_outputs():
    dout, inp, weight = _problem(9, 16, seed=4)
    _, rstd = reference.forward(inp, weight)
    rng = np.random.default_rng(5)
    dinp0 = rng.uniform(-1, 1, (9, 16))
    dweight0 = rng.uniform(-1, 1, 16)
    keep = dinp0.copy(), dweight0.copy()
    grad_inp, grad_weight = reference.backward(dout, inp, weight, rstd)
    dinp, dweight = reference.backward(dout, inp, weight, rstd, dinp0, dweight0)
    np.testing.assert_allclose(dinp, dinp0 + grad_inp, rtol=1e-14)
    np.testing.assert_allclose(dweight, dweight0 + grad_weight, rtol=1e-14)
    # the given outputs are not modified, new arrays come back
    assert np.array_equal(dinp0, keep[0]) and np.array_equal(dweight0, keep[1])
    assert dinp is not dinp0 and dweight is not dweight0
    # twice = two gradients
    dinp2, dweight2 = reference.backward(dout, inp, weight, rstd, dinp, dweight)
    np.testing.assert_allclose(dinp2, dinp0 + 2 * grad_inp, rtol=1e-13)
    np.testing.assert_allclose(dweight2, dweight0 + 2 * grad_weight, rtol=1e-13)


def test_three_dim_shapes_flatten_to_rows():
    B, T, C = 2, 5, 24
    dout, inp, weight = _problem(B * T, C, seed=6)
    out2, rstd2 = reference.forward(inp, weight)
    out3, rstd3 = reference.forward(inp.reshape(B, T, C), weight)
    assert out3.shape == (B, T, C) and rstd3.shape == (B, T)
    np.testing.assert_array_equal(out3.reshape(-1, C), out2)
    np.testing.assert_array_equal(rstd3.reshape(-1), rstd2)
    dinp2, dweight2 = reference.backward(dout, inp, weight, rstd2)
    dinp3, dweight3 = reference.backward(dout.reshape(B, T, C), inp.reshape(B, T, C), weight, rstd3,
                                         dinp=np.zeros((B, T, C)), dweight=np.zeros(C))
    assert dinp3.shape == (B, T, C) and dweight3.shape == (C,)
    np.testing.assert_array_equal(dinp3.reshape(-1, C), dinp2)
    np.testing.assert_array_equal(dweight3, dweight2)


def test_bf16_inputs_are_widened_exactly():
    p = reference.random_problem(33, 64, bf16.bfloat16, seed=7)
    assert p["inp"].dtype == bf16.bfloat16
    wide = {k: (bf16.from_bf16(v) if v.dtype == bf16.bfloat16 else v) for k, v in p.items()}
    a = reference.backward(p["dout"], p["inp"], p["weight"], p["rstd"], p["dinp"], p["dweight"])
    b = reference.backward(wide["dout"], wide["inp"], wide["weight"], wide["rstd"], wide["dinp"],
                           wide["dweight"])
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])


@pytest.mark.parametrize("dtype", [np.float32, bf16.bfloat16])
def test_random_problem_shapes_dtypes_and_seeds(dtype):
    p = reference.random_problem(11, 40, dtype, seed=8)
    assert set(p) == {"dout", "inp", "weight", "rstd", "dinp", "dweight"}
    assert p["inp"].shape == p["dout"].shape == p["dinp"].shape == (11, 40)
    assert p["weight"].shape == p["dweight"].shape == (40,)
    assert p["rstd"].shape == (11,) and p["rstd"].dtype == np.float32
    for k in ("dout", "inp", "weight", "dinp", "dweight"):
        assert p[k].dtype == np.dtype(dtype)
        assert np.all(np.abs(p[k].astype(np.float32)) <= 1)
    # accumulate=True: random initial outputs, so += and = differ
    assert all(np.any(p[k].astype(np.float32) != 0) for k in ("dinp", "dweight"))
    zero = reference.random_problem(11, 40, dtype, seed=8, accumulate=False)
    assert not any(np.any(zero[k].astype(np.float32)) for k in ("dinp", "dweight"))
    # same seed, same data; rstd is forward's, in float32, from the stored (rounded) inp
    again = reference.random_problem(11, 40, dtype, seed=8)
    for k in p:
        assert np.array_equal(np.asarray(p[k], np.float32), np.asarray(again[k], np.float32))
    _, rstd = reference.forward(p["inp"].astype(np.float32), p["weight"].astype(np.float32))
    np.testing.assert_allclose(p["rstd"], rstd, rtol=1e-6)


@pytest.mark.parametrize("shape", [(8,), (2, 2, 2, 8), ()])
def test_bad_inp_ndim_refused(shape):
    x = np.ones(shape)
    with pytest.raises(ValueError, match=r"inp must have 2 dims \(N, C\) or 3 dims \(B, T, C\)"):
        reference.forward(x, np.ones(8))
    with pytest.raises(ValueError, match=r"must have 2 dims"):
        reference.backward(x, x, np.ones(8), np.ones(1))


def test_bad_shapes_refused():
    dout, inp, weight = _problem(4, 8, seed=9)
    _, rstd = reference.forward(inp, weight)
    with pytest.raises(ValueError, match=r"weight must have shape \(8,\)"):
        reference.forward(inp, np.ones(7))
    with pytest.raises(ValueError, match=r"weight must have shape \(8,\)"):
        reference.backward(dout, inp, np.ones(9), rstd)
    with pytest.raises(ValueError, match=r"dout must have the shape of inp"):
        reference.backward(dout[:3], inp, weight, rstd)
    with pytest.raises(ValueError, match=r"rstd must hold one value per row \(4\)"):
        reference.backward(dout, inp, weight, rstd[:3])


@pytest.mark.parametrize("N,C,accumulate", [(1, 7, True), (3, 768, False), (257, 1000, True),
                                            (600, 4096, True)])
def test_backward_by_rows_is_backward(N, C, accumulate):
    from rmsnorm_lessons.core.bf16 import bfloat16

    p = reference.random_problem(N, C, bfloat16, seed=N + C, accumulate=accumulate)
    args = (p["dout"], p["inp"], p["weight"], p["rstd"], p["dinp"], p["dweight"])
    want_dinp, want_dweight = reference.backward(*args)
    got_dinp, got_dweight = reference.backward_by_rows(*args)
    assert got_dinp.dtype == got_dweight.dtype == np.float64
    np.testing.assert_array_equal(got_dinp, want_dinp)  # rows are independent: the same bits
    np.testing.assert_allclose(got_dweight, want_dweight, rtol=1e-12, atol=1e-12)


def test_backward_by_rows_refuses_mismatched_shapes():
    p = reference.random_problem(4, 8, seed=0)
    with pytest.raises(ValueError, match="dout must have the shape of inp"):
        reference.backward_by_rows(p["dout"][:3], p["inp"], p["weight"], p["rstd"])
    with pytest.raises(ValueError, match="rstd must hold one value per row"):
        reference.backward_by_rows(p["dout"], p["inp"], p["weight"], p["rstd"][:3])
    with pytest.raises(ValueError, match="dinp must have the shape of inp"):
        reference.backward_by_rows(p["dout"], p["inp"], p["weight"], p["rstd"], p["dinp"][:, :4])


@pytest.mark.parametrize("call,error,match", [
    (lambda p: reference.backward(*_four(p), dinp=np.ones((1, 8))), ValueError,
     r"dinp must have the shape of inp \(4, 8\), got \(1, 8\)"),
    (lambda p: reference.backward(*_four(p), dinp=np.ones((4, 1))), ValueError, r"dinp must"),
    (lambda p: reference.backward(*_four(p), dweight=np.ones(3)), ValueError,
     r"dweight must have shape \(8,\)"),
    (lambda p: reference.backward(p["dout"] + 0j, *_four(p)[1:]), TypeError,
     r"dout must hold real numbers"),
    (lambda p: reference.backward(np.zeros((4, 0)), np.zeros((4, 0)), np.zeros(0), p["rstd"]),
     ValueError, r"at least one channel"),
    (lambda p: reference.backward_by_rows(p["dout"][None], p["inp"][None], p["weight"],
                                          p["rstd"]), ValueError, r"inp must have 2 dims"),
    (lambda p: reference.backward_by_rows(*_four(p), dweight=np.ones(3)), ValueError,
     r"dweight must have shape \(8,\)"),
    (lambda p: reference.forward(p["inp"], np.ones(3)), ValueError, r"weight must have shape"),
    (lambda p: reference.random_problem(4, 0), ValueError, r"C must be at least 1"),
    (lambda p: reference.random_problem(4.0, 8), TypeError, r"N must be an int"),
    (lambda p: reference.random_problem(4, 8, dtype=np.float64), ValueError,
     r"dtype must be float32 or bfloat16"),
])
def test_the_reference_names_a_bad_argument(call, error, match):
    p = reference.random_problem(4, 8, seed=1)
    with pytest.raises(error, match=match):
        call(p)


def _four(p):
    return [p[k] for k in ("dout", "inp", "weight", "rstd")]
