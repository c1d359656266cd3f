"""Lesson 06's tolerance section: the best bf16 answer against the seed's check and against the
course's (:func:`seed_check`, computed on the CPU with exact float64 arithmetic, so only bf16 is
to blame), and the question on how the seed's dweight error grows with N
(:func:`check_tolerance_n`)."""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from ...core import bf16, reference
from ...course.verdict import Verdict, failed, passed, read_number

#: the seed's rule: an element passes when |gpu - ref| <= tol + |ref| * EPS
SEED_TOL = {"dinp": 1e-1, "dweight": 5e-1}
EPS = 0.079
#: the N of the seed's own check (B = 8, T = 1024)
SEED_N = 8192


def as_bf16(a) -> np.ndarray:
    """``a`` rounded to bf16 and widened again to float64."""
    return bf16.from_bf16(bf16.to_bf16(a)).astype(np.float64)


@dataclass(frozen=True)
class SeedCheck:
    """The best bf16 answer (the exact gradient of the bf16 inputs, rounded once) against two
    references: ``"course"`` (the same bf16 inputs) and ``"seed"`` (the unrounded fp32 inputs, as
    the seed's check has them). Keyed by (``"dinp"`` or ``"dweight"``, setting)."""

    ratio: dict  # |err| / (tol + |ref| * EPS), per element
    worst: dict  # the largest |err|
    ref_max: dict  # the largest |ref|

    def lines(self) -> list[str]:
        return [f"{name:<8}{setting:<7} |ref| up to {self.ref_max[name, setting]:6.1f}   "
                f"max |err| {self.worst[name, setting]:.4f}   "
                f"max err/allowed {self.ratio[name, setting].max():.3f}"
                for name, setting in self.ratio]


@functools.lru_cache(maxsize=4)
def seed_check(N: int = SEED_N, C: int = 1024, seed: int = 0) -> SeedCheck:
    """:class:`SeedCheck` on inputs uniform in [-1, 1] at N x C (the seed's shape by default)."""
    rng = np.random.default_rng(seed)
    x, g = (rng.uniform(-1, 1, (N, C)).astype(np.float32) for _ in range(2))
    w = rng.uniform(-1, 1, C).astype(np.float32)
    _, rstd = reference.forward(x, w, dtype=np.float32)
    exact_fp32 = reference.backward(g, x, w, rstd)                               # the seed's
    exact_bf16 = reference.backward(as_bf16(g), as_bf16(x), as_bf16(w), rstd)  # this course's
    ratio, worst, ref_max = {}, {}, {}
    for i, name in enumerate(("dinp", "dweight")):
        best = as_bf16(exact_bf16[i])  # the best a bf16 kernel can return
        for setting, ref in (("course", exact_bf16[i]), ("seed", exact_fp32[i])):
            err = np.abs(best - ref)
            ratio[name, setting] = err / (SEED_TOL[name] + np.abs(ref) * EPS)
            worst[name, setting] = float(err.max())
            ref_max[name, setting] = float(np.abs(ref).max())
    return SeedCheck(ratio, worst, ref_max)


def tolerance_n(err: float, n: int = SEED_N, tol: float = SEED_TOL["dweight"]) -> float:
    """The N at which an error ``err`` measured at ``n`` rows reaches ``tol``, when it grows as the
    square root of N."""
    return n * (tol / err) ** 2


def check_tolerance_n(answer, err: float | None = None) -> Verdict:
    """Q4: the best bf16 dweight's largest error in the seed's check at N = 8192 (the table of
    section 7; ``err``, default :func:`seed_check`'s). If it grows as the square root of N, from
    which N on does it exceed the seed's absolute tolerance, 0.5?"""
    tol = SEED_TOL["dweight"]
    err = seed_check().worst["dweight", "seed"] if err is None else err
    if not isinstance(err, (int, float)) or not 0 < err < tol:
        raise ValueError(f"err must be the table's error, a number between 0 and {tol}, got "
                         f"{err!r}")
    value, verdict = read_number(answer, "with a number of rows")
    if verdict is not None:
        return verdict
    want = tolerance_n(err)
    if abs(value - want) <= 0.01 * want:
        return passed(f"err x sqrt(N / {SEED_N}) = {tol} at N = {SEED_N} x ({tol} / {err:.4g})^2 "
                      f"= {want:,.0f}: errors of random sign add like a random walk. "
                      "rl.compare.tolerances lets dweight's tol grow faster than that above "
                      "N = 8192, as N**1.5, for the fp32 additions' own rounding, which can lean "
                      "one way (its docstring has the bound)")
    linear = SEED_N * tol / err
    if abs(value - linear) <= 0.01 * linear:
        return failed(f"{value:,.0f} is where an error growing in proportion to N would reach "
                      f"{tol}; the rows' roundings are as likely up as down, so they add like a "
                      "random walk: as the square root of N")
    if value <= SEED_N:
        return failed(f"at N = {SEED_N} the error was {err:.4g}, below {tol}, and it grows with "
                      "N: the answer is above 8192")
    return failed(f"not {value:,.0f}: solve {err:.4g} x sqrt(N / {SEED_N}) = {tol} for N")
