"""Running a learner's rung on the GPU: random inputs, poisoned scratch, odd shapes, the float64
reference.

:func:`run_checks` runs the rung at each shape (:func:`shapes_for`), adding into random non-zero
``dinp``/``dweight``, with scratch buffers filled with NaN before the checked call, compares each
element with a bound on fp32's rounding (:func:`rmsnorm_lessons.core.compare.compare_strict`) and
diagnoses the first failure (:mod:`~rmsnorm_lessons.course.checking.diagnosis`); a learner's rung
runs it in a child process first (:mod:`~rmsnorm_lessons.course.checking.child`).
:func:`time_against` times it beside a shipped rung; :func:`sanitize_result` runs
compute-sanitizer's racecheck and synccheck on one small call.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...core import compare, gpu, ladder, reference
from .diagnosis import _bad_mask, describe_output

#: shapes of the GPU check, in this order, each there for a reason:
#:
#: * (129, 1600): N not a multiple of the warps per block and C not a power of two; enough rows that
#:   a slip shows, few enough blocks to name them in a diagnosis;
#: * (1000, 777): C odd (776 where C must be a multiple of 8), so a loop that assumes whole warps or
#:   whole 128-bit chunks of a row is caught;
#: * (8195, 1024): enough rows that every block of a persistent grid takes more than one (8195 =
#:   2 * 4096 + 3);
#: * (1, 7): one row (one chunk of 8 where C must be a multiple of 8);
#: * :data:`SMALL_C_SHAPES`: small C with N odd and a few hundred rows, where an error of one part
#:   in C (a mean over C + 1, one term of a row's sum dropped) is far above the rounding bound of
#:   :func:`rmsnorm_lessons.core.compare.compare_strict`, even in bf16 (a bf16 ulp is 2**-7
#: relative, one
#:   part in C is 1/8 .. 1/40 of term 2 here), and a row's sums have few enough terms that
#:   dropping one row of dweight is above its bound too.
SMALL_C_SHAPES = ((333, 8), (301, 16), (257, 24), (199, 40))
SHAPES = ((129, 1600), (1000, 777), (8195, 1024), (1, 7)) + SMALL_C_SHAPES
SHAPES_8 = ((129, 1600), (1000, 776), (8195, 1024), (1, 8)) + SMALL_C_SHAPES
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
    from ...core import launch
    from ...core.run import run

    args = (p["dout"], p["inp"], p["weight"], p["rstd"], p["dinp"], p["dweight"])
    N, C = p["inp"].shape
    if poison:
        # the checked call is the launcher's second: a kernel must leave its scratch (a ticket
        # counter) as the next call needs it, and must write what it reads of the scratch (filled
        # with NaN here)
        names = _scratch_to_poison(rung, N, C)
        run(rung, *args)
        if names:
            drv = gpu.driver()
            L = launch.launcher(rung, C)
            for name, nbytes in names.items():
                buf = L.scratch(name)
                if buf is not None:
                    drv.memset_d32(buf, 0x7FC00000, nbytes // 4)  # quiet NaN in every float
            gpu.synchronize()
    return run(rung, *args)


def shapes_for(rung, shapes=None) -> list:
    """The check's shapes for ``rung``: ``shapes`` (default :data:`SHAPES`, or :data:`SHAPES_8`
    where C must be a multiple of 8), C rounded down to the rung's multiple (up, where that is 0),
    and without a shape the rung's plan refuses (a minimum C a plan needs), on this GPU or the
    saved H200's facts."""
    m = rung.c_multiple
    device = gpu.target_facts_or_fallback()[0]
    out = []
    for N, C in shapes or (SHAPES_8 if m == 8 else SHAPES):
        C = C - C % m or m
        try:
            ladder.plan(rung, N, C, device)
        except ValueError:
            continue
        if (N, C) not in out:
            out.append((N, C))
    return out


def _same_bits(a, b) -> bool:
    return all(np.array_equal(np.ascontiguousarray(x).view(np.uint8),
                              np.ascontiguousarray(y).view(np.uint8)) for x, y in zip(a, b))


@dataclass
class Outcome:
    ok: bool
    message: str
    kinds: tuple = ()


def run_checks(rung, shapes, *, seed=0, rows_per_block=None, hints=None,
               on_shape=None) -> Outcome:
    """Run ``rung`` at every shape, compared element by element with the bound of
    :func:`rmsnorm_lessons.core.compare.compare_strict` (the float64 result from the very inputs,
    rounded once, plus fp32's rounding of the sums); the first failure diagnosed. ``on_shape(N, C)``
    is
    called before each shape runs (the child says which shape it is at, in case it dies there)."""
    done = []
    for k, (N, C) in enumerate(shapes):
        if on_shape is not None:
            on_shape(N, C)
        p = reference.random_problem(N, C, rung.dtype, seed=seed + k, accumulate=True)
        try:
            got = _run(rung, p, poison=True)
        except Exception as exc:  # the learner's kernel: an illegal address, a launch failure, ...
            return Outcome(False, f"at N={N}, C={C} running it failed: {type(exc).__name__}: "
                                  f"{str(exc).strip()[:400]}", ("error",))
        bounds = compare.strict_bounds(p, rung.dtype)
        report = compare.compare_strict(rung.dtype, p, got, name=rung.name)
        if report.ok:
            if rung.deterministic and not _same_bits(got, _run(rung, p, poison=False)):
                return Outcome(False,
                               f"at N={N}, C={C} the result is right but not bitwise the same on "
                               "a second run: this rung must be deterministic (no atomics on "
                               "floats, every sum in a fixed order)", ("nondeterministic",))
            done.append(f"{N}x{C}")
            continue
        parts, kinds = wrong_result(rung, p, got, report, bounds, ladder.plan(rung, N, C)[0].grid,
                                    rows_per_block, hints)
        try:
            again = _run(rung, p, poison=False)
            if any(_bad_mask(got[i], np.asarray(again[i], np.float64),
                             bounds[name][1], 0.0).any() for i, name in enumerate(("dinp",
                                                                                    "dweight"))):
                parts.append("and the result changes from run to run: a race (a missing "
                             "__syncthreads, or threads updating one value without an atomic)")
                kinds.append("race")
        except Exception:  # the first run's failure is the message
            pass
        ok_so_far = f" (right at {', '.join(done)})" if done else ""
        return Outcome(False, f"at N={N}, C={C}{ok_so_far}: " + " ".join(parts), tuple(kinds))
    return Outcome(True,
                   f"matches the float64 reference at {len(done)} shapes ({', '.join(done)}) "
                   f"within a bound on {'fp32' if rung.dtype == np.float32 else 'bf16'}'s "
                   "rounding, adding into random starting dinp and dweight")


def wrong_result(rung, p, got, report, bounds, grid, rows_per_block=None, hints=None):
    """``(sentences, kinds)``: what is wrong with ``got`` (dinp, dweight) where ``report`` failed,
    diagnosed (:func:`.diagnosis.describe_output`) and with its first wrong element named."""
    delta = reference.backward(p["dout"], p["inp"], p["weight"], p["rstd"])
    parts, kinds = [], []
    for i, name in enumerate(("dinp", "dweight")):
        if (report.dinp if i == 0 else report.dweight).ok:
            continue
        want, allowed, _ = bounds[name]
        kind, text = describe_output(name, got[i], want, p[name], delta[i], allowed, 0.0,
                                     problem=p, grid=grid,
                                     rows_per_block=rows_per_block or rung.block_size // 32,
                                     hints=hints)
        bad = np.argwhere(_bad_mask(got[i], want, allowed, 0.0))
        if bad.size:
            at = tuple(int(x) for x in bad[0])
            text += (f" (first wrong element: {name}[{', '.join(map(str, at))}] = "
                     f"{float(np.asarray(got[i], np.float64)[at]):.6g}, want "
                     f"{float(np.asarray(want, np.float64)[at]):.6g})")
        parts.append(text)
        kinds.append(kind)
    return parts, kinds


def run_once(rung, shape, seed: int = 0) -> None:
    """One call of ``rung`` at ``shape`` on random inputs (the child's call at the timing shape:
    the parent times only a kernel that ran there)."""
    from ...core.run import run

    N, C = shape
    p = reference.random_problem(N, C, rung.dtype, seed=seed, accumulate=True)
    run(rung, p["dout"], p["inp"], p["weight"], p["rstd"], p["dinp"], p["dweight"])


def time_against(rung, compare_with: str, shape=TIME_SHAPE, repeats: int = 20, config=None,
                 label: str | None = None) -> str:
    """Yours and ``compare_with`` (launched with ``config``, named ``label``) timed at ``shape``."""
    from ...speed import bench

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
# compute-sanitizer: racecheck and synccheck on one small call

SANITIZE_SHAPE = (129, 776)  # a multiple of 8 (every rung's C rule), odd N: a few blocks, quick
SANITIZE_TIMEOUT = 300.0
MISSING = "compute-sanitizer is not installed here, so no race check was run"


@dataclass
class Sanitized:
    """What compute-sanitizer said of a rung: ``hazard`` (an error found), in a sentence."""

    hazard: bool
    sentence: str


def sanitize_result(rung, tools=("racecheck", "synccheck"), shape=SANITIZE_SHAPE) -> Sanitized:
    """compute-sanitizer's ``tools`` on one call of ``rung`` at ``shape``, each in its own child
    process (:func:`rmsnorm_lessons.inspection.sanitizer.run`), the tools side by side. A tool that
    could not run (no summary) is said, not counted as a hazard."""
    from concurrent.futures import ThreadPoolExecutor

    from ...inspection import sanitizer

    if sanitizer.find() is None:
        return Sanitized(False, MISSING)
    with ThreadPoolExecutor(len(tools)) as pool:
        reports = list(pool.map(lambda tool: sanitizer.run(rung, tool, shape, SANITIZE_TIMEOUT),
                                tools))
    found = [r for r in reports if r.errors]
    if found:
        return Sanitized(True, "compute-sanitizer: " + "; ".join(
            r.sentence() + (f" ({r.key_lines(1)})" if r.entries else "") for r in found))
    failed = [r.sentence() for r in reports if r.errors is None]
    clean = (f"compute-sanitizer ({' and '.join(tools)}) found no hazard in one call at "
             f"N={shape[0]}")
    return Sanitized(False, clean + ("; but " + "; ".join(failed) if failed else ""))


def sanitize(rung, tools=("racecheck", "synccheck"), shape=SANITIZE_SHAPE) -> str:
    """:func:`sanitize_result`'s sentence."""
    return sanitize_result(rung, tools, shape).sentence
