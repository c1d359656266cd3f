"""A kernel exercise judged on the CPU twin where there is no GPU (issue 46).

:func:`run_checks_on_cpu` runs a learner's rung on :mod:`rmsnorm_lessons.twin` at the twin's check
shapes (:data:`rmsnorm_lessons.twin.rungs.CHECK_SHAPES`: odd N, C not a multiple of 32 where the
rung allows it, one row, small C where an error of one part in C shows, and a small GPU's grid
where every block takes many rows), adding into random starting dinp and dweight, against the
float64 reference within the bf16/fp32 rounding bound, with its scratch filled with NaN. A
hazard the twin finds (a race, a divergent barrier or shuffle, an access out of bounds, a kernel
that never ends, a crash) is NOT YET with its lines; a wrong element is NOT YET with the
diagnosis and the first wrong element; a deterministic rung must give the same bits in another
block order (at the small GPU's shape, where several blocks each take many rows). What the twin
does not model is NOT VERIFIED ("needs a GPU: ... at line N"), never a
verdict. On a GPU the GPU run stays the judge (:mod:`.kernel`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ... import twin
from ...core import compare, ladder, reference
from ...twin import compile as _compile  # noqa: F401 (twin.compile)
from ...twin import rungs
from .running import Outcome, _same_bits, wrong_result

#: what every verdict from the twin says it could not judge
CANNOT = ("Judged on the CPU twin (no GPU here): it runs your CUDA C on the CPU, a block's "
          "threads in lockstep at barriers and shuffles, and checks every access for races, "
          "divergence and bounds; it cannot judge speed, nor orderings the GPU's memory model "
          "leaves weaker than the twin's rules (a GPU run is the last word)")


def why_not(rung) -> str | None:
    """None where the twin can judge ``rung`` here, else why not (a sentence: "needs a GPU: ... at
    line N", or what is missing on this machine)."""
    reason = twin.available()
    if reason is not None:
        return reason
    try:
        rungs.build_rung(rung)
    except twin.NeedsGPU as exc:
        return str(exc)
    except twin.TwinCompileError as exc:
        return f"the CPU twin's compiler cannot take it ({str(exc)[:300]})"
    return None


def why_not_text(text: str, name: str, kernels) -> str | None:
    """:func:`why_not` for a kernel that is not a rung: its text (``#line 1`` in front)."""
    reason = twin.available()
    if reason is not None:
        return reason
    try:
        twin.compile.library(text, name, tuple(kernels))
    except twin.NeedsGPU as exc:
        return str(exc)
    except twin.TwinCompileError as exc:
        return f"the CPU twin's compiler cannot take it ({str(exc)[:300]})"
    return None


@dataclass(frozen=True)
class OnCpu:
    """Where the twin runs another build of a learner's rung than the GPU does (lesson 10: v7's
    register path alone, since the whole file has what the twin does not model):
    ``rung(gpu_rung)`` gives the rung the twin runs, at ``shapes`` (as
    :data:`rmsnorm_lessons.twin.rungs.CHECK_SHAPES`), and ``note`` (a sentence) says in the verdict
    which build ran."""

    rung: Callable
    shapes: tuple = rungs.CHECK_SHAPES
    note: str = ""


#: a hazard's kind, as the verdict names it
FOUND = {"race": "a race", "divergence": "a divergence", "out of bounds": "an access out of bounds",
         "time limit": "a kernel that does not finish", "crash": "a crash", "error": "an error"}


def _hazard_kind(kind: str) -> str:
    return {"race": "race", "divergence": "divergence", "out of bounds": "error",
            "time limit": "error", "crash": "error"}.get(kind, "error")


def _why_so_slow(rung, text: str, N: int = 16) -> str:
    """A kernel stopped by the time limit, run again at a small shape (N rows, C a few of its
    multiples, no starting dinp or dweight): where it ends there, its loops advance, and ``text``
    says what the small run saw instead (each row's dinp added more than once: rows taken by more
    than one warp, or columns by more than one lane). Where it does not end there either, ``text``
    is kept (a loop that does not advance, or a wait)."""
    C = max(rung.c_multiple, 64 - 64 % rung.c_multiple or rung.c_multiple)
    try:
        p = reference.random_problem(N, C, rung.dtype, seed=7, accumulate=False)
        args = [p[n] for n in ("dout", "inp", "weight", "rstd", "dinp", "dweight")]
        got = twin.run_rung(rung, *args, calls=1, limit=10.0)
    except Exception:  # noqa: BLE001 (the first message stands)
        return text
    if got.dinp is None or any(h.kind == "time limit" for h in got.hazards):
        return text
    want_dinp, want_dweight = reference.backward(*args[:4])
    stopped = text.split(": a loop that does not advance")[0]
    ends = f"{stopped}. Its loops do advance: at N={N}, C={C} the kernel ends, but"
    rows = _times(got.dinp, want_dinp)  # rows taken again: each row's dinp a whole multiple
    if rows is not None and all(len(set(r)) == 1 for r in rows) and max(map(max, rows)) > 1:
        counts = [r[0] for r in rows]
        return (f"{ends} row r's dinp is added {min(counts)} to {max(counts)} times instead of "
                "once: rows are taken by more than one warp (does the row loop step over all the "
                "grid's warps?)")
    cols = _times(got.dweight, want_dweight)  # columns taken again: dweight[c] a whole multiple
    if cols is not None and max(cols[0]) > 1:
        return (f"{ends} dweight[c] gets its adds {min(cols[0])} to {max(cols[0])} times instead "
                "of once: the work is repeated, each column taken by more than one lane (does a "
                "column loop step by less than its lanes cover together?)")
    if rows is not None and cols is not None and max(map(max, rows)) == max(cols[0]) == 1:
        return (f"{stopped}. At N={N}, C={C} the kernel ends and is right: its loops advance, "
                "but too slowly for the check's shapes (is a loop's step smaller than it should "
                "be?)")
    return (f"{ends} its result there is wrong, the work repeated or misplaced: is a loop's step "
            "smaller than the rows or columns its threads cover together?")


def _times(have, want):
    """``have / want`` row by row as whole numbers (elements where ``want`` is not near 0), or
    None where some ratio is not near a whole number."""
    have = np.atleast_2d(np.asarray(have, np.float64))
    want = np.atleast_2d(np.asarray(want, np.float64))
    big = np.abs(want) > 1e-2 * np.abs(want).max()
    out = []
    for h, w, b in zip(have, want, big):
        if not b.any():
            continue
        ratio = h[b] / w[b]
        whole = np.round(ratio)
        if np.abs(ratio - whole).max() > 0.05:
            return None
        out.append(sorted({int(x) for x in whole}))
    return out or None


def run_checks_on_cpu(rung, *, seed: int = 0, rows_per_block=None, hints=None,
                      shapes=rungs.CHECK_SHAPES) -> Outcome:
    """:func:`.running.run_checks` on the CPU twin (see the module's docstring)."""
    done = []
    for k, (N, C, device) in enumerate(rungs.check_shapes(rung, shapes)):
        p = reference.random_problem(N, C, rung.dtype, seed=seed + k, accumulate=True)
        args = [p[n] for n in ("dout", "inp", "weight", "rstd", "dinp", "dweight")]
        got = twin.run_rung(rung, *args, device=device, seed=seed + k + 1)
        where = f"at N={N}, C={C}" + (f" (planned for a GPU of {device.multiprocessors} SMs)"
                                      if device is not None else "")
        ok_so_far = f" (right at {', '.join(done)})" if done else ""
        if got.hazards:
            first = got.hazards[0]
            more = f" ({len(got.hazards) - 1} more found)" if len(got.hazards) > 1 else ""
            text = first.text
            if first.kind == "time limit":
                text = _why_so_slow(rung, text)
            return Outcome(False, f"{where}{ok_so_far} it found {FOUND.get(first.kind, 'an error')}"
                                  f": {text}{more}", (_hazard_kind(first.kind),))
        result = (got.dinp, got.dweight)
        report = compare.compare_strict(rung.dtype, p, result, name=rung.name)
        if not report.ok:
            grid = ladder.plan(rung, N, C, device)[0].grid
            bounds = compare.strict_bounds(p, rung.dtype)
            parts, kinds = wrong_result(rung, p, result, report, bounds, grid, rows_per_block,
                                        hints)
            return Outcome(False, f"{where}{ok_so_far}: " + " ".join(parts), tuple(kinds))
        if rung.deterministic and device is not None:  # several blocks, each with many rows
            again = twin.run_rung(rung, *args, device=device, seed=seed + k + 101)
            if not _same_bits(result, (again.dinp, again.dweight)):
                return Outcome(False, f"{where} the result is right but not bitwise the same "
                                      "when the blocks run in another order: this rung must be "
                                      "deterministic (no atomics on floats, every sum in a fixed "
                                      "order)", ("nondeterministic",))
        done.append(f"{N}x{C}" + ("" if device is None else f"/{device.multiprocessors}SMs"))
    dtype = "fp32" if rung.dtype == np.float32 else "bf16"
    return Outcome(True, f"matches the float64 reference at {len(done)} shapes "
                         f"({', '.join(done)}) within a bound on {dtype}'s rounding, adding into "
                         "random starting dinp and dweight, with no race, divergence or "
                         "out-of-bounds access found")
