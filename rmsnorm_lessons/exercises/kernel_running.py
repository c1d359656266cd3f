"""Running a learner's rung on the GPU: random inputs, poisoned scratch, odd shapes, the float64
reference.

:func:`run_checks` runs the rung at each shape, adding into random non-zero ``dinp``/``dweight``,
with scratch buffers filled with NaN before the checked call, and diagnoses the first failure
(:mod:`~rmsnorm_lessons.exercises.kernel_diagnosis`); :func:`time_against` times it beside a shipped
rung; :func:`sanitize` runs compute-sanitizer on one small call.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import check, gpu, ladder, reference
from .kernel_diagnosis import _bad_mask, describe_output

#: shapes of the GPU check, in this order: N not a multiple of the warps per block with C not a
#: power of two (first: enough rows that a slip shows beyond bf16's tolerance, few enough blocks to
#: name them); enough rows for every block of a persistent grid to take more than one (8195 = 2 *
#: 4096 + 3); one row
SHAPES = ((129, 1600), (1000, 777), (8195, 1024), (1, 7))
SHAPES_8 = ((129, 1600), (1000, 776), (8195, 1024), (1, 8))
TIME_SHAPE = (8192, 1024)


def _scratch_to_poison(rung, N, C):
    names = {}
    for launch in ladder.plan(rung, N, C):
        for _, value in launch.args:
            if isinstance(value, ladder.Scratch) and value.zero == "none":
                names[value.name] = value.nbytes
    return names


def _run(rung, p, poison: bool):
    """One checked call on NumPy copies of ``p``; with ``poison`` a first call makes the launcher's
    scratch, which is then filled with NaN before the call whose result is returned."""
    from .. import kernels, launch

    args = (p["dout"], p["inp"], p["weight"], p["rstd"], p["dinp"], p["dweight"])
    N, C = p["inp"].shape
    if poison:
        # the checked call is the launcher's second: a kernel must leave its scratch (a ticket
        # counter) as the next call needs it, and must write what it reads of the scratch (filled
        # with NaN here)
        names = _scratch_to_poison(rung, N, C)
        kernels.run(rung, *args)
        if names:
            drv = gpu.driver()
            L = launch.launcher(rung, C)
            for name, nbytes in names.items():
                buf = L.scratch(name)
                if buf is not None:
                    drv.memset_d32(buf, 0x7FC00000, nbytes // 4)  # quiet NaN in every float
            gpu.synchronize()
    return kernels.run(rung, *args)


def _differs(a, b, tol, eps) -> bool:
    return bool(_bad_mask(a, np.asarray(b, np.float64), tol, eps).any())


@dataclass
class Outcome:
    ok: bool
    message: str
    kinds: tuple = ()


def run_checks(rung, shapes, *, seed=0, rows_per_block=None, hints=None) -> Outcome:
    """Run ``rung`` at every shape against the float64 reference; the first failure diagnosed."""
    done = []
    for k, (N, C) in enumerate(shapes):
        p = reference.random_problem(N, C, rung.dtype, seed=seed + k, accumulate=True)
        try:
            got = _run(rung, p, poison=True)
        except Exception as exc:  # the learner's kernel: an illegal address, a launch failure, ...
            return Outcome(False, f"at N={N}, C={C} running it failed: {type(exc).__name__}: "
                                  f"{str(exc).strip()[:400]} (after an illegal address, restart "
                                  f"the Python kernel before running anything else on the GPU)",
                           ("error",))
        ref = reference.backward(p["dout"], p["inp"], p["weight"], p["rstd"], p["dinp"],
                                 p["dweight"])
        delta = reference.backward(p["dout"], p["inp"], p["weight"], p["rstd"])
        report = check.compare_outputs(rung.dtype, N, got, ref, name=rung.name, C=C)
        if report.ok:
            if rung.deterministic:
                again = _run(rung, p, poison=False)
                same = all(np.array_equal(np.ascontiguousarray(x).view(np.uint8),
                                          np.ascontiguousarray(y).view(np.uint8)) for x,
                           y in zip(got, again))
                if not same:
                    return Outcome(False,
                                   f"at N={N}, C={C} the result is right but not bitwise the same "
                                          "on a second run: this rung must be deterministic (no "
                                          f"atomics on floats, every sum in a fixed order)",
                                   ("nondeterministic",))
            done.append(f"{N}x{C}")
            continue
        tol = check.tolerances(rung.dtype, N)
        grid = ladder.plan(rung, N, C)[0].grid
        parts, kinds = [], []
        for i, name in enumerate(("dinp", "dweight")):
            comparison = report.dinp if i == 0 else report.dweight
            if comparison.ok:
                continue
            kind, text = describe_output(name, got[i], ref[i], p[name], delta[i], *tol[name],
                                         problem=p,
                                         grid=grid, rows_per_block=rows_per_block
                                         or rung.block_size // 32,
                                         hints=hints)
            parts.append(text)
            kinds.append(kind)
        try:
            again = _run(rung, p, poison=False)
            if any(_differs(got[i], again[i], *tol[name]) for i,
                   name in enumerate(("dinp", "dweight"))):
                parts.append("and the result changes from run to run: a race (a missing "
                             "__syncthreads, or threads updating one value without an atomic)")
                kinds.append("race")
        except Exception:  # the first run's failure is the message
            pass
        ok_so_far = f" (right at {', '.join(done)})" if done else ""
        return Outcome(False, f"at N={N}, C={C}{ok_so_far}: " + " ".join(parts), tuple(kinds))
    return Outcome(True,
                   f"matches the float64 reference at {len(done)} shapes ({', '.join(done)}), "
                         f"adding into random starting dinp and dweight")


def time_against(rung, compare_with: str, shape=TIME_SHAPE, repeats: int = 20, config=None,
                 label: str | None = None) -> str:
    """Yours and ``compare_with`` (launched with ``config``, named ``label``) timed at ``shape``."""
    from .. import bench

    N, C = shape
    problem = bench.DeviceProblem(N, C, rung.dtype)
    try:
        mine = bench.bench_version(rung, N, C, gpu.H200_COPY_GBPS, repeats=repeats, problem=problem)
        shared = problem if ladder.get(compare_with).dtype == rung.dtype else None
        theirs = bench.bench_version(compare_with, N, C, gpu.H200_COPY_GBPS, repeats=repeats,
                                     problem=shared,
                                     config=config)
    finally:
        problem.free()
    return f"at {N}x{C}: yours {mine.ms:.3f} ms, {label or compare_with} {theirs.ms:.3f} ms"


# --------------------------------------------------------------------------------------------------
# compute-sanitizer (opt-in)

def sanitize(rung, tools=("racecheck", "synccheck"), shape=(129, 776)) -> str:
    """One sentence: what compute-sanitizer's ``tools`` found in one small call of ``rung``
    (:func:`rmsnorm_lessons.sanitizer.run`, a child process per tool)."""
    from .. import sanitizer

    if sanitizer.find() is None:
        return "compute-sanitizer is not installed here, so no race check was run"
    if not getattr(rung.plan, "__module__", "").startswith("rmsnorm_lessons.ladder."):
        return "the race check needs a plan from rmsnorm_lessons.ladder (a shipped rung's plan)"
    findings = []
    for tool in tools:
        report = sanitizer.run(rung, tool, shape)
        if report.errors is None or report.errors > 0:
            findings.append(report.sentence())
    if not findings:
        return (f"compute-sanitizer ({' and '.join(tools)}) found no hazard in one call at "
                f"N={shape[0]}")
    return "compute-sanitizer: " + "; ".join(findings)
