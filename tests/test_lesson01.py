"""Lesson 01 (CPU): the rewritten question on `=` for `+=` asks for a number (issue 41), and the
lesson prints the forward kernel's signature, not its body (lesson 03's answer); the second term
of dinp (the exercise): the right one passes, each likely wrong one fails saying why."""
import json

import numpy as np
import pytest

from rmsnorm_lessons.core import build, compare, reference
from rmsnorm_lessons.course import registry
from rmsnorm_lessons.lessons import lesson01


def test_the_answer_is_what_the_course_check_would_let_through():
    # a kernel that writes dinp = g: simulate the check's start and rule on a million elements
    p = reference.random_problem(1024, 1024, np.float32, seed=3)
    g, _ = reference.backward(p["dout"], p["inp"], p["weight"], p["rstd"])
    ref = p["dinp"] + g
    tol, eps = compare.tolerances(np.float32, 1024)["dinp"]
    passing = float(np.mean(np.abs(g - ref) <= tol + np.abs(ref) * eps))
    assert abs(passing - tol) < 0.1 * tol, passing  # about 1 in 1000, within the check's 10 %
    assert lesson01.check_overwrite_fraction(passing).passed
    assert lesson01.check_overwrite_fraction(tol).passed


@pytest.mark.parametrize("wrong,why", [
    (0, "within the tolerance of zero"), (1, "off by its own start"), (5e-4, "both signs"),
    (2e-3, "density 1/2"), (0.1, "percent"), (0.01, "which share")])
def test_each_likely_wrong_fraction_says_why(wrong, why):
    verdict = lesson01.check_overwrite_fraction(wrong)
    assert verdict.status == "NOT YET" and why in verdict.message, verdict


def test_placeholders():
    assert "replace the ..." in lesson01.check_overwrite_fraction(...).message
    assert "a number" in lesson01.check_overwrite_fraction("a").message


def test_lesson01_prints_the_forward_kernels_signature_not_its_loops():
    nb = json.loads(registry.by_stem("01_rmsnorm_math").path.read_text())
    shown = "\n".join("".join(o.get("text", "")) for c in nb["cells"] if c["cell_type"] == "code"
                      for o in c.get("outputs", []))
    body = build.kernel_source("rmsnorm_forward")
    assert "void rmsnorm_forward(float* out" in shown
    loop = next(line.strip() for line in body.splitlines() if line.strip().startswith("for ("))
    assert loop not in shown and "warp_reduce_sum" not in shown


# --- the second term of dinp (the exercise) -------------------------------------------------------


def _term2_right(dout, inp, weight, rstd):
    norm = inp * rstd[:, None]
    dnorm = weight * dout
    return -rstd[:, None] * norm * np.mean(dnorm * norm, axis=1, keepdims=True)


def test_lesson01_right_answer_passes():
    verdict = lesson01.check_term2(_term2_right)
    assert verdict.passed, verdict.message
    assert str(verdict).startswith("PASS")


@pytest.mark.parametrize("wrong,expect", [
    (lambda d, x, w, r: -_term2_right(d, x, w, r), "sign"),
    (lambda d, x, w, r: _term2_right(d, x, w, r) / r[:, None], "rstd in front is missing"),
    (lambda d, x, w, r: _term2_right(d, x, w, r) * x.shape[1], "sum"),
    (lambda d, x, w, r: -r[:, None] * (x * r[:, None])
     * np.mean(w * d * x * r[:, None], axis=0, keepdims=True), "axis=1"),
    (lambda d, x, w, r: -r[:, None] * (x * r[:, None]) * np.mean(w * d * x * r[:, None], axis=1),
     "keepdims"),
    (lambda d, x, w, r: np.mean(w * d * x * r[:, None], axis=1), "shape"),
    (lambda d, x, w, r: None, "returned None"),
    (lambda d, x, w, r: np.zeros_like(x), "expected"),
])
def test_lesson01_wrong_answers_fail_with_a_reason(wrong, expect):
    verdict = lesson01.check_term2(wrong)
    assert not verdict.passed
    assert expect in verdict.message, verdict.message


def test_lesson01_skeleton_fails():
    def term2(dout, inp, weight, rstd):
        raise NotImplementedError

    assert "NotImplementedError" in lesson01.check_term2(term2).message
    assert not lesson01.check_term2("not a function")
