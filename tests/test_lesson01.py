"""Lesson 01 (CPU): the rewritten question on `=` for `+=` asks for a number (issue 41), and the
lesson prints the forward kernel's signature, not its body (lesson 03's answer)."""
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
