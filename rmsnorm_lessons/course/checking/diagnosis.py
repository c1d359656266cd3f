"""Diagnosing a learner's wrong result: which output, which rows and columns, and what kind of slip.

:func:`describe_output` compares one output (``dinp`` or ``dweight``) with the float64 reference and
its starting value and names the slip: never added to, overwritten instead of accumulated, off by a
constant factor, some blocks' partials missing or counted twice, NaN read from memory never written.
"""
from __future__ import annotations

import numpy as np


def _lines(numbers) -> str:
    numbers = list(numbers)
    return ", ".join(map(str, numbers[:8])) + (f" and {len(numbers) - 8} more" if len(numbers) > 8
                                               else "")


def found(*groups) -> list:
    """The message of each (indices, message) group whose indices are not empty, in order."""
    return [message for indices, message in groups if len(indices)]


def _ranges(indices, total: int, what: str) -> str:
    idx = np.asarray(sorted(set(int(i) for i in indices)))
    if idx.size == total:
        return f"every {what}"
    if idx.size == 0:
        return f"no {what}"
    if idx[-1] == total - 1 and idx.size == idx[-1] - idx[0] + 1:
        if idx.size == 1:
            return f"only the last {what} ({idx[0]})"
        return f"the last {idx.size} {what}s ({idx[0]}..{idx[-1]} of 0..{total - 1})"
    breaks = np.flatnonzero(np.diff(idx) > 1)
    starts = np.concatenate(([idx[0]], idx[breaks + 1]))
    ends = np.concatenate((idx[breaks], [idx[-1]]))
    parts = [f"{s}" if s == e else f"{s}..{e}" for s, e in zip(starts, ends)]
    shown = ", ".join(parts[:6]) + (f", ... ({len(parts)} ranges)" if len(parts) > 6 else "")
    return f"{idx.size} of {total} {what}s ({shown})"


def _bad_mask(got, ref, tol, eps):
    g = np.asarray(got, np.float64)
    r = np.asarray(ref, np.float64)
    return np.isfinite(r) & ~(np.abs(g - r) <= tol + np.abs(r) * eps)


def _fit(got, initial, delta):
    """Least squares ``got ~ a * initial + f * delta``: (a, f, residual relative to |delta|)."""
    g, i, d = (np.asarray(x, np.float64).ravel() for x in (got, initial, delta))
    if not np.all(np.isfinite(g)):
        return None
    A = np.stack([i, d], axis=1)
    (a, f), *_ = np.linalg.lstsq(A, g, rcond=None)
    res = np.linalg.norm(g - A @ np.array([a, f])) / max(np.linalg.norm(d), 1e-30)
    return float(a), float(f), float(res)


def _factor_hint(f: float, C: int) -> str:
    for value, hint in ((32.0,
                         ": 32 lanes each did the whole work (a loop that does not step by the "
                         "warp?)"),
                        (2.0, ": counted twice"), (0.5, ": half of it"),
                        (float(C), ": C times (a sum where the mean belongs, or a missing / C)"),
                        (1.0 / C, ": divided by C once too often")):
        if abs(f - value) <= 0.02 * abs(value):
            return hint
    return ""


def _block_weights(got, initial, problem, grid: int, rows_per_block: int):
    """dweight as ``a * initial + sum_b w_b * (block b's rows' sum)``: (a, w, residual) or None."""
    x = problem["inp"].astype(np.float64)
    g = problem["dout"].astype(np.float64)
    r = problem["rstd"].astype(np.float64)[:, None]
    contrib = x * r * g  # (N, C): each row's part of dweight
    N, C = contrib.shape
    if grid + 1 > C // 2:
        return None
    owner = (np.arange(N) // rows_per_block) % grid
    B = np.zeros((grid, C))
    np.add.at(B, owner, contrib)
    A = np.concatenate([np.asarray(initial, np.float64)[None, :], B], axis=0).T  # (C, grid + 1)
    y = np.asarray(got, np.float64)
    if not np.all(np.isfinite(y)):
        return None
    coef, *_ = np.linalg.lstsq(A, y, rcond=None)
    res = np.linalg.norm(y - A @ coef) / max(np.linalg.norm(B.sum(axis=0)), 1e-30)
    return float(coef[0]), coef[1:], float(res)


def describe_output(name: str, got, ref, initial, delta, tol, eps, *, problem=None, grid=None,
                    rows_per_block=None, hints=None) -> tuple[str, str]:
    """``(kind, sentence)`` saying how one wrong output (``dinp`` or ``dweight``) is wrong. ``kind``
    is one of ``unchanged``, ``overwritten``, ``factor``, ``blocks``, ``lost``, ``nonfinite``,
    ``wrong``. An element is wrong where ``|got - ref| > tol + |ref| * eps``: ``tol`` may be an
    array, each element's bound (:func:`rmsnorm_lessons.core.compare.strict_bounds`, with ``eps``
    0)."""
    hints = hints or {}
    g = np.asarray(got, np.float64)
    bad = _bad_mask(got, ref, tol, eps)
    if g.ndim == 2:
        where = f"rows: {_ranges(np.flatnonzero(bad.any(axis=1)), g.shape[0], 'row')}; columns: " \
                f"{_ranges(np.flatnonzero(bad.any(axis=0)), g.shape[1], 'column')}"
    else:
        where = f"columns: {_ranges(np.flatnonzero(bad), g.shape[0], 'column')}"
    C = g.shape[-1]

    def say(kind, text):
        extra = hints.get(f"{name} {kind}") or hints.get(kind) or ""
        return kind, f"{name} is wrong ({int(bad.sum())} of {bad.size} values; {where}): {text}" + \
            (f". {extra}" if extra else "")

    if not np.all(np.isfinite(g[np.isfinite(np.asarray(ref, np.float64))])):
        return say("nonfinite",
                   "it holds NaN or inf: it read something never written (a scratch buffer, "
                                "shared memory not zeroed) or past the end of a row")
    init = np.asarray(initial, np.float64)
    kept = np.all(np.abs(g - init) <= tol + np.abs(init) * eps)
    if kept and (np.abs(np.asarray(delta)) > tol).any():
        return say("unchanged",
                   "it came back with its starting values: your kernel never adds to it")
    fit = _fit(g, init, delta)
    small = 0.05
    if name == "dweight" and problem is not None and grid and rows_per_block:
        fitted = _block_weights(g, init, problem, grid, rows_per_block)
        if fitted is not None:
            a, w, res = fitted
            whole = np.rint(w)
            if res < 0.02 and np.all(np.abs(w - whole) < 0.1) and abs(a - round(a)) < 0.1:
                missing = np.flatnonzero(whole == 0)
                twice = np.flatnonzero(whole >= 2)
                parts = found(
                    (missing, f"the partials of {missing.size} of {grid} blocks are missing "
                              f"(blocks {_lines(missing)})"),
                    (twice, f"the partials of {twice.size} of {grid} blocks are counted more "
                            f"than once (blocks {_lines(twice)})"))
                if round(a) != 1:
                    parts.append("its starting value is lost (= where += belongs)" if round(a) == 0
                                 else
                                 f"its starting value is counted {int(round(a))} times")
                if parts:
                    return say("blocks", "; ".join(parts))
    if fit is not None:
        a, f, res = fit
        if abs(a) < small and abs(f - 1) < small and res < small:
            return say("overwritten",
                       "it holds this call's gradient alone, without its starting value: "
                                      "overwritten instead of accumulated (= where += belongs)")
        if abs(a - 1) < small and res < small and abs(f - 1) >= 2 * small:
            return say("factor",
                       f"this call's part is off by a constant factor: {f:.4g} times the right "
                                 f"amount{_factor_hint(f, C)}")
    if fit is not None and abs(fit[0]) < small:
        return say("lost",
                   "its starting value is lost (= where += belongs?), and this call's part is not "
                           "right either")
    return say("wrong",
               "not a simple slip: compare your code with the lesson's comment and its TODOs, or "
               "call rl.notebook.compare_with_ours(verdict, ..., anyway=True) to see ours")
