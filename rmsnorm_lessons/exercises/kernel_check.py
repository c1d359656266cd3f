"""Checking a learner's kernel: it becomes a rung like ours, then it is compiled, inspected, run and timed.

:func:`check_kernel` takes the CUDA text of a notebook cell and returns a :class:`~.Verdict`:

1. **Compile** (nvcc, no GPU needed). nvcc's errors are reported at the line of the learner's cell: the
   harness puts ``#line 1`` in front, so nvcc's line k is line k of the text (a cell that starts with
   ``source = r'''`` and a line break numbers its text as the cell's own lines).
2. **Inspect** (no GPU): registers, shared memory and spills of every kernel (ptxas), then the lesson's
   static checks on the SASS (a warp shuffle, no local memory, 128-bit loads, a fence before the
   ticket...). A failed static check is NOT YET, and so is a ``// TODO`` line left in the text.
3. Without a GPU the verdict is **NOT VERIFIED (no GPU here)**, never PASS, and says what was checked.
4. **Run** (GPU): random inputs, random non-zero starting ``dinp``/``dweight`` (a kernel must add into
   them), scratch buffers filled with NaN before the checked call (a kernel must write what it reads),
   odd shapes (N not a multiple of the warps, C not a power of two), compared with the float64
   reference (:func:`rmsnorm_lessons.check.compare_outputs`). A wrong result is diagnosed: dinp or
   dweight, which rows and columns, overwritten instead of accumulated, off by a constant factor, some
   blocks' partials missing or counted twice, different from run to run.
5. **Time** it beside the lesson's shipped rung ("yours 0.41 ms, v3_smem 0.36 ms").

``sanitize=True`` also runs compute-sanitizer's racecheck and synccheck on one small call, where the
tool is installed, and sums its report up in a sentence.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from .. import build, check, gpu, ladder, reference
from . import Verdict, failed, not_verified, passed

#: shapes of the GPU check, in this order: N not a multiple of the warps per block with C not a power of two
#: (first: enough rows that a slip shows beyond bf16's tolerance, few enough blocks to name them); enough
#: rows for every block of a persistent grid to take more than one (8195 = 2 * 4096 + 3); one row
SHAPES = ((129, 1600), (1000, 777), (8195, 1024), (1, 7))
SHAPES_8 = ((129, 1600), (1000, 776), (8195, 1024), (1, 8))
TIME_SHAPE = (8192, 1024)
#: the opcodes of an atomic on global memory: REDG when its result is unused (atomicAdd), ATOMG otherwise
GLOBAL_ATOMICS = ("RED", "REDG", "ATOM", "ATOMG")
SKELETON_BLOCK = re.compile(r"^[ \t]*#if 0\b[^\n]*BEGIN SKELETON[^\n]*\n.*?^[ \t]*#endif\b[^\n]*END SKELETON[^\n]*$",
                            re.S | re.M)
_TODO = re.compile(r"^\s*//\s*TODO\b")
_NVCC_LINE = re.compile(r"^(?P<file>[^\s(]+)\((?P<line>\d+)\): (?P<kind>error|warning)\b:?\s*(?P<text>.*)$")


# ----------------------------------------------------------------------------------------------------
# static checks: what can be told from the compiled code alone


@dataclass
class Compiled:
    """What the static checks look at: the rung, nvcc's result, and the SASS (None where cuobjdump is missing)."""

    rung: ladder.Rung
    compiled: build.Compiled
    listing: object  # rmsnorm_lessons.sass.Listing or None
    text: str  # the learner's text with comments stripped

    def instructions(self, kernel: str | None):
        if self.listing is None:
            return []
        functions = self.listing.functions
        if kernel is not None:
            return list(functions[kernel].instructions) if kernel in functions else []
        return [i for f in functions.values() for i in f.instructions]


@dataclass(frozen=True)
class Static:
    """One static check: ``what`` says what it looks for (shown when it holds), ``test`` returns None when
    it holds and the sentence to show otherwise. ``sass``: needs the SASS listing (cuobjdump)."""

    what: str
    test: Callable
    sass: bool = True


def _matching(instructions, prefix):
    """Instructions whose opcode is ``prefix`` or starts with ``prefix.``; ``"LDG.128"``/``"STG.128"`` match
    any 128-bit LDG/STG (``LDG.E.EF.128``); a tuple of prefixes matches any of them."""
    prefixes = (prefix,) if isinstance(prefix, str) else tuple(prefix)
    found = []
    for i in instructions:
        for p in prefixes:
            if i.opcode == p or i.opcode.startswith(p + ".") or (
                    p.endswith(".128") and i.opcode.split(".")[0] == p[:3] and ".128" in i.opcode):
                found.append(i)
                break
    return found


def _name(prefix) -> str:
    return prefix if isinstance(prefix, str) else "/".join(prefix)


def sass_has(prefix: str, what: str, hint: str, kernel: str | None = None, at_least: int = 1) -> Static:
    """The SASS of ``kernel`` (all kernels: None) holds at least ``at_least`` instructions whose opcode is
    ``prefix`` or starts with ``prefix.`` (``"SHFL.BFLY"``, ``"MEMBAR"``, ``"LDG.E.128"``, ...)."""

    def test(c: Compiled):
        n = len(_matching(c.instructions(kernel), prefix))
        if n >= at_least:
            return None
        return f"{hint} (the SASS{' of ' + kernel if kernel else ''} has {n} {_name(prefix)}, expected at least {at_least})"

    return Static(what, test)


def sass_lacks(prefix: str, what: str, hint: str, kernel: str | None = None) -> Static:
    def test(c: Compiled):
        n = len(_matching(c.instructions(kernel), prefix))
        return None if n == 0 else f"{hint} (the SASS{' of ' + kernel if kernel else ''} has {n} {_name(prefix)})"

    return Static(what, test)


def sass_before(first: str, then: str, what: str, hint: str, kernel: str | None = None) -> Static:
    """An instruction ``first`` comes before the first ``then`` in the code of ``kernel``."""

    def test(c: Compiled):
        ins = c.instructions(kernel)
        later = _matching(ins, then)
        if not later:
            return f"{hint} (no {_name(then)} in the SASS{' of ' + kernel if kernel else ''})"
        earlier = [i for i in _matching(ins, first) if i.offset < later[0].offset]
        return None if earlier else f"{hint} (no {_name(first)} before the first {_name(then)} in the SASS)"

    return Static(what, test)


def no_local_memory(kernel: str | None = None) -> Static:
    def test(c: Compiled):
        spills = [r for k, r in c.compiled.resources.items() if (kernel is None or k == kernel) and r.spills]
        local = _matching(c.instructions(kernel), "LDL") + _matching(c.instructions(kernel), "STL")
        if not spills and not local:
            return None
        return (f"the kernel uses local memory ({len(local)} LDL/STL; spills: "
                f"{', '.join(r.kernel for r in spills) or 'none'}): a local array indexed at run time, or too "
                f"many registers; keep per-thread values in registers (#pragma unroll over constant bounds)")

    return Static("no local memory (no LDL/STL, no spills)", test, sass=False)


def source_lacks(pattern: str, what: str, hint: str) -> Static:
    """The learner's text (comments stripped) does not match the regular expression ``pattern``."""

    def test(c: Compiled):
        return hint if re.search(pattern, c.text) else None

    return Static(what, test, sass=False)


# ----------------------------------------------------------------------------------------------------
# text helpers


def strip_comments(code: str) -> str:
    """Comments replaced by spaces, line breaks kept (so line numbers still match)."""
    code = re.sub(r"/\*.*?\*/", lambda m: re.sub(r"[^\n]", " ", m.group(0)), code, flags=re.S)
    return re.sub(r"//[^\n]*", "", code)


def without_skeletons(source: str) -> str:
    """``source`` with the ``#if 0 // ### BEGIN SKELETON`` blocks of the instructor edition blanked
    (line breaks kept): the skeleton's TODO lines there are not the learner's."""
    return SKELETON_BLOCK.sub(lambda m: "\n" * m.group(0).count("\n"), source)


def todo_lines(source: str) -> list[int]:
    """Line numbers (1 = the first line of the text) of ``// TODO`` lines outside skeleton blocks."""
    return [i for i, line in enumerate(without_skeletons(source).splitlines(), 1) if _TODO.match(line)]


def nvcc_errors(message: str, stem: str, keep: int = 8) -> str:
    """nvcc's errors, one a line, ``line 12: ...`` for lines of the learner's text."""
    out = []
    for raw in message.splitlines():
        m = _NVCC_LINE.match(raw.strip())
        if m and m.group("kind") == "error":
            where = (f"line {m.group('line')}" if Path(m.group("file")).name == stem
                     else f"{Path(m.group('file')).name} line {m.group('line')}")
            out.append(f"{where}: {m.group('text')}")
        elif "error" in raw and not m and "nvcc failed" not in raw and "error detected" not in raw:
            out.append(raw.strip())
    return "\n  ".join(out[:keep]) or message.strip()[-800:]


def _lines(numbers) -> str:
    numbers = list(numbers)
    return ", ".join(map(str, numbers[:8])) + (f" and {len(numbers) - 8} more" if len(numbers) > 8 else "")


# ----------------------------------------------------------------------------------------------------
# diagnosing a wrong result


def _ranges(indices, total: int, what: str) -> str:
    idx = np.asarray(sorted(set(int(i) for i in indices)))
    if idx.size == total:
        return f"every {what}"
    if idx.size == 0:
        return f"no {what}"
    if idx[-1] == total - 1 and idx.size == idx[-1] - idx[0] + 1:
        return f"the last {idx.size} {what}s ({idx[0]}..{idx[-1]} of 0..{total - 1})" if idx.size > 1 \
            else f"only the last {what} ({idx[0]})"
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
    for value, hint in ((32.0, ": 32 lanes each did the whole work (a loop that does not step by the warp?)"),
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
    """``(kind, sentence)`` saying how one wrong output (``dinp`` or ``dweight``) is wrong. ``kind`` is one
    of ``unchanged``, ``overwritten``, ``factor``, ``blocks``, ``lost``, ``nonfinite``, ``wrong``."""
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
        return say("nonfinite", "it holds NaN or inf: it read something never written (a scratch buffer, "
                                "shared memory not zeroed) or past the end of a row")
    init = np.asarray(initial, np.float64)
    if np.all(np.abs(g - init) <= tol + np.abs(init) * eps) and np.abs(np.asarray(delta)).max() > tol:
        return say("unchanged", "it came back with its starting values: your kernel never adds to it")
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
                parts = []
                if missing.size:
                    parts.append(f"the partials of {missing.size} of {grid} blocks are missing (blocks "
                                 f"{_lines(missing)})")
                if twice.size:
                    parts.append(f"the partials of {twice.size} of {grid} blocks are counted more than once "
                                 f"(blocks {_lines(twice)})")
                if round(a) != 1:
                    parts.append("its starting value is lost (= where += belongs)" if round(a) == 0 else
                                 f"its starting value is counted {int(round(a))} times")
                if parts:
                    return say("blocks", "; ".join(parts))
    if fit is not None:
        a, f, res = fit
        if abs(a) < small and abs(f - 1) < small and res < small:
            return say("overwritten", "it holds this call's gradient alone, without its starting value: "
                                      "overwritten instead of accumulated (= where += belongs)")
        if abs(a - 1) < small and res < small and abs(f - 1) >= 2 * small:
            return say("factor", f"this call's part is off by a constant factor: {f:.4g} times the right "
                                 f"amount{_factor_hint(f, C)}")
    if fit is not None and abs(fit[0]) < small:
        return say("lost", "its starting value is lost (= where += belongs?), and this call's part is not right "
                           "either")
    return say("wrong", "not a simple slip: compare your code with the lesson's kernel line by line")


# ----------------------------------------------------------------------------------------------------
# running on the GPU


def _scratch_to_poison(rung, N, C):
    names = {}
    for launch in ladder.plan(rung, N, C):
        for _, value in launch.args:
            if isinstance(value, ladder.Scratch) and value.zero == "none":
                names[value.name] = value.nbytes
    return names


def _run(rung, p, poison: bool):
    """One checked call on NumPy copies of ``p``; with ``poison`` a first call makes the launcher's scratch,
    which is then filled with NaN before the call whose result is returned."""
    from .. import kernels, launch

    args = (p["dout"], p["inp"], p["weight"], p["rstd"], p["dinp"], p["dweight"])
    N, C = p["inp"].shape
    if poison:
        # the checked call is the launcher's second: a kernel must leave its scratch (a ticket counter) as
        # the next call needs it, and must write what it reads of the scratch (filled with NaN here)
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
                                  f"{str(exc).strip()[:400]} (after an illegal address, restart the Python "
                                  f"kernel before running anything else on the GPU)", ("error",))
        ref = reference.backward(p["dout"], p["inp"], p["weight"], p["rstd"], p["dinp"], p["dweight"])
        delta = reference.backward(p["dout"], p["inp"], p["weight"], p["rstd"])
        report = check.compare_outputs(rung.dtype, N, got, ref, name=rung.name, C=C)
        if report.ok:
            if rung.deterministic:
                again = _run(rung, p, poison=False)
                same = all(np.array_equal(np.ascontiguousarray(x).view(np.uint8),
                                          np.ascontiguousarray(y).view(np.uint8)) for x, y in zip(got, again))
                if not same:
                    return Outcome(False, f"at N={N}, C={C} the result is right but not bitwise the same on a "
                                          f"second run: this rung must be deterministic (no atomics on floats, "
                                          f"every sum in a fixed order)", ("nondeterministic",))
            done.append(f"{N}x{C}")
            continue
        tol = check.tolerances(rung.dtype, N)
        grid = ladder.plan(rung, N, C)[0].grid
        parts, kinds = [], []
        for i, name in enumerate(("dinp", "dweight")):
            comparison = report.dinp if i == 0 else report.dweight
            if comparison.ok:
                continue
            kind, text = describe_output(name, got[i], ref[i], p[name], delta[i], *tol[name], problem=p,
                                         grid=grid, rows_per_block=rows_per_block or rung.block_size // 32,
                                         hints=hints)
            parts.append(text)
            kinds.append(kind)
        try:
            again = _run(rung, p, poison=False)
            if any(_differs(got[i], again[i], *tol[name]) for i, name in enumerate(("dinp", "dweight"))):
                parts.append("and the result changes from run to run: a race (a missing __syncthreads, or "
                             "threads updating one value without an atomic)")
                kinds.append("race")
        except Exception:  # the first run's failure is the message
            pass
        ok_so_far = f" (right at {', '.join(done)})" if done else ""
        return Outcome(False, f"at N={N}, C={C}{ok_so_far}: " + " ".join(parts), tuple(kinds))
    return Outcome(True, f"matches the float64 reference at {len(done)} shapes ({', '.join(done)}), adding "
                         f"into random starting dinp and dweight")


def time_against(rung, compare_with: str, shape=TIME_SHAPE, repeats: int = 20, config=None,
                 label: str | None = None) -> str:
    """Yours and ``compare_with`` (launched with ``config``, named ``label``) timed at ``shape``."""
    from .. import bench

    N, C = shape
    problem = bench.DeviceProblem(N, C, rung.dtype)
    try:
        mine = bench.bench_version(rung, N, C, gpu.H200_COPY_GBPS, repeats=repeats, problem=problem)
        shared = problem if ladder.get(compare_with).dtype == rung.dtype else None
        theirs = bench.bench_version(compare_with, N, C, gpu.H200_COPY_GBPS, repeats=repeats, problem=shared,
                                     config=config)
    finally:
        problem.free()
    return f"at {N}x{C}: yours {mine.ms:.3f} ms, {label or compare_with} {theirs.ms:.3f} ms"


# ----------------------------------------------------------------------------------------------------
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
        return f"compute-sanitizer ({' and '.join(tools)}) found no hazard in one call at N={shape[0]}"
    return "compute-sanitizer: " + "; ".join(findings)


# ----------------------------------------------------------------------------------------------------
# the harness


def register(source: str, *, name: str, kernels, plan, dtype, c_multiple: int = 1, block_size: int = 256,
             max_block: int = 1024, shared_memory=None, defines=None, deterministic: bool = False,
             embed: Callable[[str], str] | None = None) -> ladder.Rung:
    """The learner's text as a registered rung (``#line 1`` in front: nvcc's lines are the text's).

    ``embed``: where the learner writes one function of a shipped kernel, it takes the text (with its
    ``#line 1`` already in front) and returns the whole source with the text spliced in; it must put a
    ``#line`` back to the shipped file after the text, so nvcc names the lines of both."""
    text = f'#line 1 "{name}"\n' + source
    return ladder.rung_from_source(name=name, source=embed(text) if embed else text, plan=plan, kernels=kernels,
                                   dtype=dtype, c_multiple=c_multiple, block_size=block_size, max_block=max_block,
                                   shared_memory=shared_memory, defines=defines, deterministic=deterministic,
                                   adds="a learner's kernel")


def _not_text(source) -> Verdict:
    if not isinstance(source, str):
        return failed(f"pass the kernel's CUDA text as a string (r'''...'''), not {type(source).__name__}")
    return failed("the kernel's text is empty")


@dataclass
class Inspected:
    """What steps 1-2 found, for the run: the loaded code's arch and compile result, and the sentences of the verdict."""

    arch: str
    compiled: object  # build.Compiled
    head: str  # "nvcc compiled NAME for ARCH (resources)."
    checked: str  # " Checked in the SASS: ..." or ""


def inspect_text(source: str, name: str, kernels, static, compile_it: Callable, sass_of: Callable, *,
                 rung=None, against: str) -> tuple[Verdict | None, Inspected | None]:
    """Steps 1-3 for any learner's text: compile it (``compile_it(arch)``, for this GPU's arch, else
    :data:`rmsnorm_lessons.build.DEFAULT_ARCH`), name its kernels' resources, run the ``static`` checks on
    its SASS (``sass_of(compiled, arch)``; skipped, and said, where the disassembler is missing) and look
    for TODO lines. Returns ``(verdict, None)`` where the check ends here: NOT YET, or NOT VERIFIED
    without a GPU (``against``: what a GPU would compare it with); else ``(None, Inspected)``."""
    from .. import sass

    reason = gpu.why_unavailable()
    arch = gpu.facts().arch if reason is None else build.DEFAULT_ARCH
    try:
        compiled = compile_it(arch)
    except build.CompileError as exc:
        return failed(f"nvcc does not accept it (line numbers are your text's):\n  {nvcc_errors(str(exc), name)}"), None
    missing = [k for k in kernels if k not in compiled.resources]
    if missing:
        return failed(f"no kernel named {', '.join(missing)} in your text: keep the names of the skeleton, "
                      f"declared extern \"C\" __global__"), None
    shown = "; ".join(f"{r.kernel}: {r.registers} registers, {r.shared_bytes} B static shared memory, "
                      + (f"spills {r.spill_stores} B stored / {r.spill_loads} B loaded" if r.spills else "no spills")
                      for k, r in compiled.resources.items() if k in kernels)
    try:
        listing, sass_note = sass_of(compiled, arch), ""
    except sass.ToolMissing as exc:
        listing, sass_note = None, f" The SASS checks were skipped: {str(exc).split('. ')[0]}."
    ctx = Compiled(rung, compiled, listing, strip_comments(without_skeletons(source)))
    held, problems = [], []
    for s in static:
        if s.sass and listing is None:
            continue
        outcome = s.test(ctx)
        (held if outcome is None else problems).append(s.what if outcome is None else outcome)
    todo = todo_lines(source)
    head = f"nvcc compiled {name} for {arch} ({shown})."
    checked = f" Checked in the SASS: {'; '.join(held)}." if held else ""
    todo_note = (f"Fill in the TODO regions: line(s) {_lines(todo)} still start with // TODO (delete each TODO "
                 f"line once you have written that part). " if todo else "")
    if problems:  # what is wrong first: a progress line shows the start of the message
        return failed(f"{todo_note}{'; '.join(problems)}. {head}{checked}{sass_note}"), None
    if todo:
        return failed(f"{todo_note}{head}{checked}{sass_note}"), None
    if reason is not None:
        return not_verified(f"no GPU here, so it was compiled and inspected but not run. {head}{checked}"
                            f"{sass_note} On a GPU this check runs it against {against}."), None
    return None, Inspected(arch, compiled, head, checked)


def check_plain_kernel(source, *, name: str, kernels, static=(), run=None, against: str = "NumPy") -> Verdict:
    """A learner's kernel that is not a rung (lesson 08's ``scale_wide``): compiled from its text alone
    (``#line 1`` in front, so nvcc's line numbers are the text's), inspected as :func:`check_kernel`
    inspects a rung, and where a GPU works handed to ``run(module)`` (the loaded cubin, a PyCUDA module),
    which returns an :class:`Outcome`. Without a GPU: NOT VERIFIED, never PASS."""
    from .. import sass

    if not isinstance(source, str) or not source.strip():
        return _not_text(source)
    stop, seen = inspect_text(
        source, name, kernels, static,
        lambda arch: build.compile_source(f'#line 1 "{name}"\n' + source, arch, name=name),
        lambda compiled, arch: sass.parse_sass(sass.nvdisasm_json(compiled.binary), name, arch),
        against=against)
    if stop is not None:
        return stop
    if run is None:
        return not_verified(f"no way to run it was given. {seen.head}{seen.checked}")
    outcome = run(gpu.driver().module_from_buffer(seen.compiled.binary))
    return (passed if outcome.ok else failed)(f"{seen.head}{seen.checked} {outcome.message}")


def check_kernel(source, *, name: str, kernels, plan, dtype, compare_with: str = "v3_smem", c_multiple: int = 1,
                 shapes=None, block_size: int = 256, max_block: int = 1024, shared_memory=None, defines=None,
                 deterministic: bool = False, rows_per_block: int | None = None, static=(), hints=None,
                 sanitize_it: bool = False, timing: bool = True, seed: int = 0,
                 embed: Callable[[str], str] | None = None, compare_config=None,
                 compare_label: str | None = None) -> Verdict:
    """Register ``source`` as the rung ``name``, compile it, inspect it and (where a GPU works) run it.

    ``kernels``/``plan``/``dtype``/... are :func:`rmsnorm_lessons.ladder.rung_from_source`'s; ``static``
    the lesson's :class:`Static` checks; ``rows_per_block``: rows one block takes per step of its loop
    (default: warps per block), to name blocks in a diagnosis; ``hints``: extra sentences by diagnosis kind
    (e.g. ``{"dweight unchanged": "did the last block run?"}``); ``compare_with``: the shipped rung timed
    beside yours (launched with ``compare_config``, named ``compare_label``); ``embed``: splices the text into
    a shipped kernel (see :func:`register`); the TODO lines and the source checks still read the learner's
    text alone. Returns PASS, NOT YET or NOT VERIFIED (no
    GPU here).
    """
    if not isinstance(source, str) or not source.strip():
        return _not_text(source)
    rung = register(source, name=name, kernels=kernels, plan=plan, dtype=dtype, c_multiple=c_multiple,
                    block_size=block_size, max_block=max_block, shared_memory=shared_memory, defines=defines,
                    deterministic=deterministic, embed=embed)
    from .. import sass

    stop, seen = inspect_text(source, name, rung.kernels, static, lambda arch: build.compile_file(rung, arch),
                              lambda compiled, arch: sass.listing(rung, arch), rung=rung,
                              against="the float64 reference")
    if stop is not None:
        return stop
    head, checked = seen.head, seen.checked
    shapes = shapes or (SHAPES_8 if c_multiple == 8 else SHAPES)
    shapes = [(N, C - C % c_multiple or c_multiple) for N, C in shapes]
    outcome = run_checks(rung, shapes, seed=seed, rows_per_block=rows_per_block, hints=hints)
    if not outcome.ok:
        verdict = failed(f"{head} {outcome.message}")
        verdict.kinds = outcome.kinds
        return verdict
    extra = []
    if timing:
        try:
            extra.append(time_against(rung, compare_with, config=compare_config, label=compare_label))
        except Exception as exc:  # timing is a bonus: never turns a right kernel into a failure
            extra.append(f"(not timed: {type(exc).__name__}: {str(exc)[:200]})")
    if sanitize_it:
        extra.append(sanitize(rung))
    return passed(f"{name} {outcome.message}.{checked} " + ". ".join(extra))
