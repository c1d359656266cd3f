"""Comparing a GPU result with the reference: by the seed's rule, or by a bound on rounding.

The seed's rule (:func:`compare`, :func:`compare_outputs`): an element passes when ``|gpu - ref| <=
tol + |ref| * eps`` (``eps`` = FLT_EPSILON for fp32 outputs, 0.079 for bf16 ones); non-finite
reference values are skipped, as the seed's ``validate_result`` does, except that a non-finite GPU
value where the reference is finite always fails. bf16's 0.079 is about ten ulps: a mean over C + 1
instead of C changes term 2 by one part in C + 1, far inside it.

The learner-kernel checks use :func:`compare_strict` instead: each element's bound comes from a
model of the rounding an fp32 kernel does (:func:`strict_bounds`), so an error of one part in C in
any term shows at small C.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from . import ladder, reference
from .bf16 import bfloat16
from .run import run

FLT_EPSILON = float(np.finfo(np.float32).eps)
BF16_EPS = 0.079  # the seed's eps for bf16 outputs: about ten bf16 ulps (2**-7) of relative slack

#: the seed's absolute tolerances, (dinp, dweight), per storage dtype
SEED_TOLERANCE = {
    np.dtype(np.float32): (1e-3, 1e-3),
    bfloat16: (1e-1, 5e-1),
}
SEED_ROWS = 8192  # B*T of the seed's own check


def tolerances(dtype, N: int) -> dict:
    """``{"dinp": (tol, eps), "dweight": (tol, eps)}`` for a version storing ``dtype``, at N rows.

    dinp is per row, so the seed's figure holds at any N. dweight[c] is a sum of N terms, added one
    by one (by a thread, an atomic or a block's partials) in fp32. The k-th addition rounds with an
    error of at most u * |S_k| (u = 2**-24), and with terms of zero mean |S_k| grows like sqrt(k).
    If the N errors were independent they would add like a random walk, sqrt(sum of k) ~ N /
    sqrt(2): linear in N. Their sum is bounded only by u * sum(sqrt(k)) ~ (2/3) u N**1.5, reached
    when they lean one way, and float atomics arriving in an order that depends on N give no
    independence to count on. So the tolerance grows with the bound, (N / 8192)**1.5 above the
    seed's own N. (The linear rule was tried: v1's fp32 atomics over 3 x 8191 rows broke it on the
    H200.)
    """
    dtype = np.dtype(dtype)
    tol_dinp, tol_dweight = SEED_TOLERANCE[dtype]
    eps = FLT_EPSILON if dtype == np.float32 else BF16_EPS
    scale = max(1.0, N / SEED_ROWS) ** 1.5
    return {"dinp": (tol_dinp, eps), "dweight": (tol_dweight * scale, eps)}


@dataclass
class Comparison:
    name: str
    ok: bool
    checked: int
    failures: int
    max_abs_error: float
    rel_l2_error: float  # ||gpu - ref|| / ||ref|| over finite reference values
    tol: float
    eps: float
    worst: list = field(default_factory=list)  # (index tuple, gpu, ref, |err|, allowed)
    rule: str = ""  # the rule in words, where it is not the seed's

    def __str__(self) -> str:
        rule = self.rule or f"|err| <= {self.tol:g} + |ref|*{self.eps:g}"
        head = (f"{self.name}: {'OK' if self.ok else 'FAIL'}  {self.failures}/{self.checked} "
                f"outside {rule}; max |err| "
                f"{self.max_abs_error:.3g}, ||err||/||ref|| {self.rel_l2_error:.3g}")
        if self.ok:
            return head
        rows = [f"    at {idx}: gpu {g:.6g}  ref {r:.6g}  |err| {e:.3g} > {a:.3g}" for idx, g, r, e,
                a in self.worst]
        return "\n".join([head, *rows])


def compare(gpu, ref, tol: float, eps: float, name: str = "output", worst: int = 5) -> Comparison:
    """Compare element-wise with the seed's rule; keep the ``worst`` failing elements (largest
    excess)."""
    return _compare(gpu, ref, lambda r, _: tol + np.abs(r) * eps, name, worst, tol=tol, eps=eps)


def compare_bounded(gpu, ref, allowed, name: str = "output", worst: int = 5, *,
                    tol: float | None = None, eps: float = 0.0) -> Comparison:
    """Compare element-wise: an element passes when ``|gpu - ref| <= allowed`` (an array of the
    shape of ``ref``, or a number). ``tol``/``eps`` only label the rule in the report (default: the
    largest bound)."""
    allowed = np.asarray(allowed, np.float64)
    if allowed.ndim:  # one bound per element (a copy only where it must be broadcast)
        allowed = np.broadcast_to(allowed, np.shape(ref)).reshape(-1)
        return _compare(gpu, ref, lambda _, part: allowed[part], name, worst, tol=tol, eps=eps)
    return _compare(gpu, ref, lambda r, _: allowed, name, worst, tol=tol, eps=eps)


BLOCK = 1 << 17  # elements compared at a time: a few float64 temporaries of 1 MiB, in cache


def _compare(gpu, ref, allowed_of, name, worst, tol, eps) -> Comparison:
    """The comparison, on blocks of :data:`BLOCK` elements on several threads (NumPy lets go of the
    GIL): the bench compares tens of millions of elements per check. ``allowed_of(r, part)``: the
    bound of the reference's elements ``r`` at flat positions ``part`` (a slice)."""
    g = np.asarray(gpu)
    r = np.asarray(ref)
    if g.shape != r.shape:
        raise ValueError(f"{name}: the result has shape {g.shape} but the reference has {r.shape}")
    g, r = g.reshape(-1), r.reshape(-1)

    def block(start):
        part = slice(start, min(r.size, start + BLOCK))
        rb = r[part].astype(np.float64, copy=False)
        allowed = allowed_of(rb, part)
        finite = np.isfinite(rb)
        err = np.abs(g[part].astype(np.float64) - rb)
        bad = finite & ~(err <= allowed)  # NaN in gpu where ref is finite fails here
        err_f = np.where(finite, err, 0.0)
        err_f[np.isnan(err_f)] = np.inf
        flat = np.flatnonzero(bad)
        excess = np.where(np.isfinite(err[flat]), err[flat] - np.broadcast_to(allowed, rb.shape)[
            flat], np.inf)
        keep = np.argsort(-excess, kind="stable")[:worst]
        return (int(finite.sum()), flat.size, float(err_f.max(initial=0.0)),
                float(np.dot(err_f, err_f)), float(np.dot(rb[finite], rb[finite])),
                float(np.max(allowed, initial=0.0)), excess[keep], flat[keep] + start)

    starts = range(0, r.size, BLOCK)
    if len(starts) <= 1:
        parts = [block(0)]
    else:
        with ThreadPoolExecutor(max_workers=reference._threads()) as pool:
            parts = list(pool.map(block, starts))
    checked, n_bad, err2, ref2 = (sum(p[k] for p in parts) for k in (0, 1, 3, 4))
    max_err, most_allowed = (float(np.max([p[k] for p in parts])) for k in (2, 5))
    rule = "" if tol is not None else "the element's rounding bound"
    if tol is None:
        tol = most_allowed
    excess = np.concatenate([p[6] for p in parts])
    where = np.concatenate([p[7] for p in parts])
    listed = []
    for i in where[np.argsort(-excess, kind="stable")[:worst]]:
        rv = float(r[i])
        gv = float(g[i])
        listed.append((tuple(int(k) for k in np.unravel_index(i, np.shape(ref))), gv, rv,
                       abs(gv - rv),
                       float(np.broadcast_to(allowed_of(np.float64([rv]), slice(i, i + 1)),
                                             (1,))[0])))
    ref_norm, err_norm = float(np.sqrt(ref2)), float(np.sqrt(err2))
    return Comparison(name=name, ok=n_bad == 0, checked=checked, failures=n_bad,
                      max_abs_error=max_err,
                      rel_l2_error=err_norm / ref_norm if ref_norm > 0 else err_norm,
                      tol=tol, eps=eps, worst=listed, rule=rule)


@dataclass
class CheckReport:
    version: str
    N: int
    C: int
    dinp: Comparison
    dweight: Comparison

    @property
    def ok(self) -> bool:
        return self.dinp.ok and self.dweight.ok

    def __str__(self) -> str:
        return f"{self.version} N={self.N} C={self.C}\n  {self.dinp}\n  {self.dweight}"


def compare_outputs(dtype, N: int, got, want, name: str = "result",
                    C: int | None = None) -> CheckReport:
    """Compare ``got = (dinp, dweight)`` with ``want`` (the float64 reference) by the seed's rule,
    with the tolerances of :func:`tolerances` for a version storing ``dtype`` (or a version / Rung)
    at N rows.

    The one place where the course compares gradients: check, bench, peers, tests and exercises use
    it."""
    if isinstance(dtype, (str, ladder.Rung)):
        dtype = ladder.get(dtype).dtype
    tol = tolerances(dtype, N)
    C = C if C is not None else int(np.shape(want[1])[-1])
    return CheckReport(name, N, C, compare(got[0], want[0], *tol["dinp"], name="dinp"),
                       compare(got[1], want[1], *tol["dweight"], name="dweight"))


class Inputs:
    """One random problem (:func:`reference.random_problem`) and its float64 references, computed
    once and shared by the checks of several rungs at one shape (the bench checks every rung at
    every shape: the host's reference would otherwise take most of its time)."""

    def __init__(self, N: int, C: int, dtype, seed=0, accumulate: bool = True):
        self.N, self.C, self.dtype = int(N), int(C), np.dtype(dtype)
        self.problem = reference.random_problem(N, C, dtype, seed=seed, accumulate=accumulate)
        self._references = {}

    def reference(self, overwrite: bool = False):
        """The float64 ``(dinp, dweight)``: accumulated into the starting ones, or (``overwrite``)
        the gradient alone in dinp and dweight accumulated, as the overwrite mode computes."""
        if overwrite not in self._references:
            p = self.problem
            self._references[overwrite] = reference.backward_by_rows(
                p["dout"], p["inp"], p["weight"], p["rstd"], None if overwrite else p["dinp"],
                p["dweight"])
        return self._references[overwrite]

    def gradient(self):
        """The float64 ``(dinp, dweight)`` of this problem alone, nothing accumulated (what the
        peers compute)."""
        if "gradient" not in self._references:
            p = self.problem
            self._references["gradient"] = reference.backward_by_rows(
                p["dout"], p["inp"], p["weight"], p["rstd"])
        return self._references["gradient"]


def check_version(version, N: int, C: int, seed=0, accumulate: bool = True, *,
                  overwrite: bool = False,
                  config=None, block_size: int | None = None, inputs=None) -> CheckReport:
    """Run ``version`` on fresh random inputs (dinp and dweight non-zero unless
    ``accumulate=False``) and compare with the float64 reference (needs a GPU). ``overwrite``: the
    version's dinp = mode. ``inputs``: a :class:`Inputs` to share the problem and its references
    among several checks at one shape (``seed`` and ``accumulate`` are then its own)."""
    spec = ladder.get(version)
    inputs = inputs or Inputs(N, C, spec.dtype, seed, accumulate)
    if (inputs.N, inputs.C, inputs.dtype) != (N, C, np.dtype(spec.dtype)):
        raise ValueError(f"inputs are for {inputs.N}x{inputs.C} {inputs.dtype}, not the "
                         f"{N}x{C} {np.dtype(spec.dtype)} of {spec.name}")
    p = inputs.problem
    dinp, dweight = run(spec, p["dout"], p["inp"], p["weight"], p["rstd"], p["dinp"],
                                p["dweight"],
                                overwrite=overwrite, config=config, block_size=block_size)
    ref = inputs.reference(overwrite)
    name = f"{spec.name} (dinp=)" if overwrite else spec.name
    return compare_outputs(spec.dtype, N, (dinp, dweight), ref, name=name, C=C)


# --------------------------------------------------------------------------------------------------
# the learner-kernel checks' comparison: a bound per element from a model of the rounding

U32 = 2.0 ** -24  # fp32's unit roundoff: one rounding changes a value by at most u * |value|
#: the model's bound is multiplied by this, for what it leaves out (fast-math's division and
#: reciprocal, an FMA the compiler forms or not, second-order terms)
SAFETY = 2.0
# fast math flushes fp32 subnormals to zero: each flushed operation may lose up to this much
FTZ = 2.0 ** -126
_MANTISSA = {np.dtype(np.float32): 23, bfloat16: 7}


def ulp(x, dtype) -> np.ndarray:
    """The spacing of ``dtype`` (float32 or bf16) numbers at ``|x|`` (the smallest normal's spacing
    at zero and below)."""
    bits = _MANTISSA[np.dtype(dtype)]
    a = np.maximum(np.abs(np.asarray(x, np.float64)), 2.0 ** -126)
    return np.exp2(np.floor(np.log2(a)) - bits)


def round_to(x, dtype) -> np.ndarray:
    """``x`` (float64) rounded to ``dtype`` (through float32, as a kernel's ``__float2bfloat16``
    rounds its fp32 value) and widened back to float64."""
    return np.asarray(x, np.float64).astype(np.float32).astype(np.dtype(dtype)).astype(np.float64)


def strict_bounds(problem: dict, dtype) -> dict:
    """``{"dinp": (want, allowed, ref), "dweight": (...)}`` for one call on ``problem`` (the inputs
    the kernel saw: :func:`rmsnorm_lessons.core.reference.random_problem`'s dict,
    ``dinp``/``dweight`` their starting values) by a kernel that stores ``dtype`` and computes in
    fp32.

    ``ref`` is the float64 result from those very inputs (bf16 values widened exactly), ``want`` is
    ``ref`` rounded once to ``dtype``, and an element of the kernel's result passes when it is
    within ``allowed`` of ``want``: ``SAFETY`` times a bound on the fp32 error of the sums, from the
    magnitudes of their terms, plus one ulp of ``dtype`` at the result.

    The sums: a sum of k terms in fp32, in any order (a loop, a butterfly, atomics, partials), is
    within ``(k - 1) * u * sum|terms|`` of the exact sum (u = 2**-24, first order). A row's mean
    ``m = sum_c dnorm*norm / C`` sums C terms, each a product of 3 or 4 factors (3 more roundings),
    then multiplies by rstd and divides by C; ``dinp = d + rstd * (dnorm - norm * m)`` carries m's
    error times ``rstd * |norm|``, and 4 roundings of its own terms, and one of the addition.
    ``dweight[c]`` sums N products (2 roundings each) and its starting value: N + 1 terms."""
    dtype = np.dtype(dtype)
    x = np.asarray(problem["inp"]).astype(np.float64)
    g = np.asarray(problem["dout"]).astype(np.float64)
    w = np.asarray(problem["weight"]).astype(np.float64)
    r = np.asarray(problem["rstd"]).astype(np.float64).reshape(-1, 1)
    d0 = np.asarray(problem["dinp"]).astype(np.float64)
    dw0 = np.asarray(problem["dweight"]).astype(np.float64)
    N, C = x.shape
    norm, dnorm = x * r, w * g
    terms = dnorm * norm
    m = terms.sum(axis=1, keepdims=True) / C
    P = np.abs(terms).sum(axis=1, keepdims=True)
    dm = (C + 8) * U32 * P / C + FTZ * (C + 8)
    t = r * (dnorm - norm * m)
    ref_dinp = d0 + t
    acc_dinp = (r * np.abs(norm) * dm + 4 * U32 * r * (np.abs(dnorm) + np.abs(norm * m))
                + U32 * (np.abs(d0) + np.abs(t)) + 8 * FTZ)
    wterms = norm * g
    ref_dw = dw0 + wterms.sum(axis=0)
    acc_dw = (N + 4) * U32 * (np.abs(wterms).sum(axis=0) + np.abs(dw0)) + FTZ * (N + 4)
    out = {}
    for name, ref, acc in (("dinp", ref_dinp, acc_dinp), ("dweight", ref_dw, acc_dw)):
        want = round_to(ref, dtype)
        allowed = SAFETY * acc + ulp(np.abs(want) + SAFETY * acc, dtype)
        out[name] = (want, allowed, ref)
    return out


def compare_strict(dtype, problem: dict, got, name: str = "result") -> CheckReport:
    """Compare ``got = (dinp, dweight)`` of one call on ``problem`` with :func:`strict_bounds`: the
    comparison of the learner-kernel checks (``kernel_running.run_checks``). ``dtype``: what the
    kernel stores (or a version / Rung)."""
    if isinstance(dtype, (str, ladder.Rung)):
        dtype = ladder.get(dtype).dtype
    bounds = strict_bounds(problem, dtype)
    N, C = np.shape(problem["inp"])
    parts = [compare_bounded(got[i], *bounds[k][:2], name=k) for i, k in enumerate(("dinp",
                                                                                    "dweight"))]
    return CheckReport(name, N, C, *parts)
