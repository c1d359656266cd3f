"""Lesson 01: the second term of dinp, in NumPy.

``dinp += rstd * (dnorm - norm * mean(dnorm * norm))`` splits into term 1, ``rstd * dnorm``, and
term 2, ``-rstd * norm * mean(dnorm * norm)`` with the mean over each row's C channels. The learner
writes ``term2(dout, inp, weight, rstd)`` returning an ``(N, C)`` array; :func:`check_term2` runs it
on random inputs and names the usual slips (sign, a missing rstd, sum for mean, the wrong axis).
"""
from __future__ import annotations

import numpy as np

from ..course.plots import _outside_pyplot
from ..course.verdict import Verdict, choice_verdict, failed, passed, read_number


def _term2(dout, inp, weight, rstd):
    norm = inp * rstd[:, None]
    dnorm = weight * dout
    return -rstd[:, None] * norm * np.mean(dnorm * norm, axis=1, keepdims=True)


def _slips(dout, inp, weight, rstd):
    """Answers a learner may give by mistake, each with the sentence that explains it."""
    N, C = inp.shape
    r = rstd[:, None]
    norm = inp * r
    dnorm = weight * dout
    row_mean = np.mean(dnorm * norm, axis=1, keepdims=True)
    right = -r * norm * row_mean
    return [
        (-right,
         "the sign is flipped: term 2 is subtracted (dinp = rstd * (dnorm - norm * mean(...)))"),
        (-norm * row_mean,
         "the factor rstd in front is missing: the whole bracket is multiplied by rstd"),
        (-r * r * norm * row_mean,
         "rstd appears once too often: did you multiply norm by rstd again?"),
        (-r * inp * row_mean, "inside the product use norm = inp * rstd, not inp"),
        (-r * norm * np.mean(dnorm * inp, axis=1, keepdims=True),
         "the mean is of dnorm * norm (norm = inp * rstd), not of dnorm * inp"),
        (-r * norm * np.mean(dout * norm, axis=1, keepdims=True),
         "the mean is of dnorm * norm with dnorm = weight * dout, not of dout * norm"),
        (C * right, "that is the sum over the row; term 2 uses the mean (divide by C)"),
        (-r * norm * np.mean(dnorm * norm, axis=0, keepdims=True),
         "the mean runs over the row's C channels (axis=1), not down the N rows (axis=0)"),
        (-r * norm * np.mean(dnorm * norm),
         "the mean is per row (axis=1, one value per row), not over the whole array"),
        (right / C, "divided by C twice? np.mean already divides by C"),
    ]


def _problem(N, C, seed):
    rng = np.random.default_rng(seed)
    inp = rng.uniform(-1, 1, (N, C))
    weight = rng.uniform(-1, 1, C)
    dout = rng.uniform(-1, 1, (N, C))
    rstd = 1.0 / np.sqrt(np.mean(inp * inp, axis=1) + 1e-5)
    return dout, inp, weight, rstd


def check_term2(term2) -> Verdict:
    """Check ``term2(dout, inp, weight, rstd) -> (N, C)`` against the derivation, in float64."""
    if not callable(term2):
        return failed(f"pass your function itself (check_term2(term2)), not {type(term2).__name__}")
    for N, C, seed in ((5, 12, 1), (1, 7, 2), (9, 3, 3)):
        args = _problem(N, C, seed)
        keep = [a.copy() for a in args]
        try:
            got = term2(*[a.copy() for a in args])
        except NotImplementedError:
            return failed("term2 still raises NotImplementedError: replace that line with your "
                          "NumPy code")
        except Exception as exc:  # the learner's code, any error: report it as one line
            hint = ""
            if "broadcast" in str(exc):
                hint = (". A per-row value of shape (N,) lines up with an (N, C) array only as (N, "
                        "1): use keepdims=True or [:, None]")
            return failed(f"term2 raised {type(exc).__name__}: {exc} (at N={N}, C={C}){hint}")
        if got is None:
            return failed("term2 returned None: end it with `return ...`")
        got = np.asarray(got, dtype=np.float64)
        want = _term2(*keep)
        if got.shape != want.shape:
            hint = ""
            if got.shape == (N,) or got.shape == (N, 1):
                hint = (" (one value per row: that is the mean; multiply by -rstd * norm to get "
                        "the term)")
            return failed(f"term2 returned shape {got.shape} for N={N}, C={C}; it must be (N, C) = "
                          f"{want.shape}{hint}")
        if np.allclose(got, want, rtol=1e-9, atol=1e-12):
            continue
        for wrong, why in _slips(*keep):
            if np.shape(wrong) == want.shape and np.allclose(got, wrong, rtol=1e-9, atol=1e-12):
                return failed(why)
        if np.allclose(got, want, rtol=1e-5, atol=1e-7):
            error = float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-300))
            return failed(f"right to about float32's precision (relative error {error:.1e}), not "
                          "float64's: the inputs are float64 and so is the reference; compute "
                          "in float64 (no float32 cast) to match it")
        worst = np.unravel_index(np.argmax(np.abs(got - want)), want.shape)
        return failed(f"at N={N}, C={C}, element {tuple(int(i) for i in worst)}: got "
                      f"{got[worst]:.6g}, expected {want[worst]:.6g}. Term 2 is -rstd * norm * "
                      f"mean(dnorm * norm, per row)")
    return passed("term 2 matches the derivation on three random shapes (float64). "
                  "Term 1 + term 2 is exactly what rl.reference.backward adds to dinp.")


# --- the end-of-lesson questions (no cell prints their answers)


def check_rstd_scaling(answer) -> Verdict:
    """Every x of a row multiplied by 2 (ε ignored): rstd is a) doubled, b) halved, c)
    unchanged."""
    return choice_verdict(
        answer, "b", why="halved: the mean square grows 4 times and rstd is its inverse square "
                         "root, so norm = x * rstd stays the same",
        why_not={"a": "rstd is an inverse: a larger row gives a smaller rstd",
                 "c": "rstd depends on the row's mean square; what happens to x² when x "
                      "doubles?"})


def check_overwrite_fraction(fraction) -> Verdict:
    """``fraction``: the share of dinp's elements that still pass the course's check when a kernel
    writes ``dinp = g`` instead of adding (``dinp += g``), where the check starts dinp uniform in
    [-1, 1] (:func:`rmsnorm_lessons.core.reference.random_problem`) and accepts an element when
    ``|err| <= tol + |ref| * eps`` (:func:`rmsnorm_lessons.core.compare.tolerances`, fp32)."""
    from ..core import compare

    got, verdict = read_number(fraction, "with the fraction of dinp's elements that still pass "
                                         "(between 0 and 1)")
    if verdict is not None:
        return verdict
    tol, eps = compare.tolerances(np.float32, 8192)["dinp"]
    # the error is the start d0 itself, uniform on [-1, 1]: P(|d0| <= tol) = tol; eps * |ref|
    # (ref = d0 + g, at most a few) adds under a millionth, inside the 10 % the answer may miss by
    want = tol
    if abs(got - want) <= 0.1 * want:
        return passed(f"about {want:.2g}: = leaves every element off by its start, so only the "
                      f"few that started within {tol:g} of zero pass, about 1 in {1 / want:.0f}. "
                      "From zeros all would pass: the course's checks start from random dinp "
                      "and dweight")
    if got == 0:
        return failed("some elements started within the tolerance of zero: = and += differ "
                      "there by less than the check allows. How many of a uniform start on "
                      "[-1, 1] lie that close to zero?")
    if got == 1:
        return failed("= gives g where += gives start + g: each element is off by its own start, "
                      "which is rarely within the tolerance of zero")
    if abs(got - want / 2) <= 0.1 * want / 2:
        return failed("both signs count: |start| <= tol is the interval [-tol, tol], twice tol "
                      "wide, under a density of 1/2")
    if abs(got - 2 * want) <= 0.2 * want:
        return failed("a uniform start on [-1, 1] has density 1/2, not 1: the interval [-tol, tol] "
                      "holds 2 tol x 1/2 of the elements")
    if abs(got - 100 * want) <= 10 * want:
        return failed("that reads as a percent: give the fraction (between 0 and 1)")
    return failed(f"{got:g} is not it: with = the error of an element is its start; which share "
                  f"of starts, uniform on [-1, 1], lies within tol = {tol:g} of zero?")


def check_fd_passes(N: int, C: int, passes) -> Verdict:
    """``passes``: forward passes :func:`rmsnorm_lessons.core.reference.loss_gradients_fd` makes for
    the gradients of an (N, C) ``inp`` and a C ``weight`` (central differences)."""
    got, verdict = read_number(passes, "of passes with your answer (a number or an expression)",
                               whole=True)
    if verdict is not None:
        return verdict
    entries = int(N) * int(C) + int(C)
    if got == 2 * entries:
        return passed(f"{2 * entries}: two forward passes (+h and -h) for each of the {entries} "
                      f"entries of inp and weight; finite differences cost grows with the input "
                      f"size, which is why the check uses small shapes")
    if got == entries:
        return failed("central differences nudge each entry twice: +h and -h")
    if got == 2 * int(N) * int(C):
        return failed("weight has entries too: its gradient is checked as well")
    return failed("count the entries of inp and of weight, then the passes each one costs")


def gradient_check(analytic, numeric, title: str = "backward against finite differences"):
    """Scatter of analytic gradients against finite differences; points on the diagonal agree."""
    a = np.ravel(np.asarray(analytic, np.float64))
    f = np.ravel(np.asarray(numeric, np.float64))
    if a.shape != f.shape:
        raise ValueError(f"analytic and numeric must have the same size, got {a.size} and {f.size}")
    fig, ax = _outside_pyplot((3.6, 3.2))
    lo, hi = float(min(a.min(), f.min())), float(max(a.max(), f.max()))
    ax.plot([lo, hi], [lo, hi], color="#bbbbbb", lw=1)
    ax.scatter(f, a, s=10)
    ax.set_xlabel("finite difference", fontsize=8)
    ax.set_ylabel("backward()", fontsize=8)
    ax.tick_params(labelsize=7)
    err = float(np.max(np.abs(a - f))) if a.size else 0.0
    ax.set_title(f"{title}\nmax |difference| {err:.1e}", fontsize=8)
    return fig
