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
            return Outcome(False, f"{where}{ok_so_far} it found {FOUND.get(first.kind, 'an error')}"
                                  f": {first.text}{more}", (_hazard_kind(first.kind),))
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
