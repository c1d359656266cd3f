"""Checking a learner's kernel: it becomes a rung like ours, then it is compiled, inspected, run and
timed.

:func:`check_kernel` takes the CUDA text of a notebook cell and returns a :class:`~.Verdict`:

1. **Compile** (nvcc, no GPU needed). nvcc's errors are reported at the line of the learner's cell:
   the harness puts ``#line 1`` in front, so nvcc's line k is line k of the text (a cell that starts
   with
   ``source = r'''`` and a line break numbers its text as the cell's own lines).
2. **Inspect** (no GPU): registers, shared memory and spills of every kernel (ptxas), then the
   lesson's static checks on the SASS (a warp shuffle, no local memory, 128-bit loads, a fence
   before the ticket...). A failed static check is NOT YET, and so is a ``// TODO`` line left in the
   text.
3. Without a GPU the **CPU twin** runs it (:mod:`.cpu`, :mod:`rmsnorm_lessons.twin`): PASS (on
   the CPU) or NOT YET with the first wrong element or the race, divergence or out-of-bounds
   access and its lines, saying what the CPU cannot judge (speed, the memory model's weaker
   orderings). Where the twin cannot run it (a construct it does not model, no g++), the verdict
   is **NOT VERIFIED** and says why, never PASS. Steps 4-6 need a GPU.
4. **Run** (GPU), in a child process first (:mod:`.kernel_child`): random inputs, random non-zero
   starting ``dinp``/``dweight`` (a kernel must add into them), scratch buffers filled with NaN
   before the checked call (a kernel must write what it reads), odd shapes and small C
   (:data:`~.kernel_running.SHAPES`), each element compared with a bound on fp32's rounding
   (:func:`rmsnorm_lessons.core.compare.compare_strict`: an error of one part in C shows), and one
   call at the timing shape. A wrong result is diagnosed: dinp or dweight, which rows and columns,
   overwritten instead of accumulated, off by a constant factor, some blocks' partials missing or
   counted twice, different from run to run. A kernel that crashes the child (an illegal or
   misaligned address) is NOT YET, with the line compute-sanitizer's memcheck names; the notebook's
   own GPU context never ran it.
5. **Race check** (GPU, once the numbers are right): compute-sanitizer's racecheck and synccheck on
   one small call, where the tool is installed (the verdict says so where it is not). A hazard found
   is NOT YET. ``sanitize=False`` skips it, for speed.
6. **Time** it beside the lesson's shipped rung ("yours 0.41 ms, v3_smem 0.36 ms"), in this process:
   only a kernel that passed in the child is launched here.

The parts live in four modules, re-exported here: :mod:`.kernel_static` (the static checks and text
helpers), :mod:`.kernel_running` (the GPU run, timing, compute-sanitizer), :mod:`.kernel_child` (the
child process) and :mod:`.kernel_diagnosis` (what a wrong result tells).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ...core import build, gpu, ladder
from ..verdict import Verdict, failed, not_verified, passed
from . import child as kernel_child
from . import cpu as cpu_twin
from . import running as kernel_running

# lesson 09 names chunks with _ranges
from .diagnosis import _lines, _ranges, describe_output  # noqa: F401
from .running import (SHAPES, SHAPES_8, SMALL_C_SHAPES, TIME_SHAPE, Outcome, run_checks, sanitize,
                      shapes_for, time_against)
from .static import (  # noqa: F401 (lessons 09 and 10 count opcodes)
    GLOBAL_ATOMICS,
    SKELETON_BLOCK,
    Compiled,
    Static,
    _matching,
    _name,
    no_local_memory,
    nvcc_errors,
    sass_before,
    sass_between,
    sass_has,
    sass_lacks,
    source_lacks,
    strip_comments,
    todo_lines,
    without_skeletons,
)

__all__ = ["GLOBAL_ATOMICS", "SHAPES", "SHAPES_8", "SKELETON_BLOCK", "SMALL_C_SHAPES", "TIME_SHAPE",
           "Compiled",
           "Inspected",
           "Outcome", "Static", "check_kernel", "check_plain_kernel", "describe_output",
           "inspect_text",
           "no_local_memory", "nvcc_errors", "register", "run_checks", "sanitize", "sass_before",
           "sass_between",
           "sass_has", "sass_lacks", "shapes_for", "source_lacks", "strip_comments", "time_against",
           "todo_lines",
           "without_skeletons"]


def register(source: str, *, name: str, like=None, embed: Callable[[str], str] | None = None,
             **fields) -> ladder.Rung:
    """The learner's text as a registered rung (``#line 1`` in front: nvcc's lines are the text's).

    ``like``: the shipped rung it copies (plan, dtype, C rule, blocks, shared memory, determinism,
    defines); ``fields``: what differs from it, or every field without ``like``
    (:func:`rmsnorm_lessons.core.ladder.rung_from_source`). ``embed``: where the learner writes one
    function of a shipped kernel, it takes the text (with its ``#line 1`` already in front) and
    returns the whole source with the text spliced in; it must put a ``#line`` back to the shipped
    file after the text, so nvcc names the lines of both."""
    text = f'#line 1 "{name}"\n' + source
    return ladder.rung_from_source(name=name, source=embed(text) if embed else text, like=like,
                                   adds="a learner's kernel", **fields)


def _not_text(source) -> Verdict:
    if not isinstance(source, str):
        return failed("pass the kernel's CUDA text as a string (r'''...'''), not "
                      f"{type(source).__name__}")
    return failed("the kernel's text is empty")


@dataclass
class Inspected:
    """What steps 1-2 found, for the run: the loaded code's arch and compile result, and the
    sentences of the verdict."""

    arch: str
    compiled: object  # build.Compiled
    head: str  # "nvcc compiled NAME for ARCH (resources)."
    checked: str  # " Checked in the SASS: ... Checked in nvcc's report: ... Not checked here ..."
    on_cpu: bool = False  # no GPU here: the CPU twin runs it


def inspect_text(source: str, name: str, kernels, static, compile_it: Callable, sass_of: Callable,
                 *,
                 rung=None, against: str,
                 cpu: Callable[[], str | None] | None = None) -> tuple[Verdict | None,
                                                                 Inspected | None]:
    """Steps 1-3 for any learner's text: compile it (``compile_it(arch)``, for this GPU's arch, else
    :data:`rmsnorm_lessons.core.build.DEFAULT_ARCH`), name its kernels' resources, run the
    ``static`` checks on its SASS (``sass_of(compiled, arch)``; skipped, and said, where the
    disassembler is missing) and look for TODO lines. Returns ``(verdict, None)`` where the check
    ends here: NOT YET, or NOT VERIFIED without a GPU (``against``: what a GPU would compare it
    with); else ``(None, Inspected)``. ``cpu()``: where there is no GPU, None if the CPU twin can
    run the text (``Inspected.on_cpu``), else why not (said in the NOT VERIFIED verdict)."""
    from ...inspection import sass

    reason = gpu.why_unavailable()
    arch = gpu.facts().arch if reason is None else build.DEFAULT_ARCH
    try:
        compiled = compile_it(arch)
    except build.CompileError as exc:
        return failed("nvcc does not accept it (line numbers are your text's):\n  "
                      + exc.summary(stem=name)), None
    missing = [k for k in kernels if k not in compiled.resources]
    if missing:
        return failed(f"no kernel named {', '.join(missing)} in your text: keep the names of the "
                      f"skeleton, declared extern \"C\" __global__"), None
    shown = "; ".join(f"{r.kernel}: {r.registers} registers, {r.shared_bytes} B static shared "
                      "memory, "
                      + (f"spills {r.spill_stores} B stored / {r.spill_loads} B loaded" if r.spills
                         else "no spills")
                      for k, r in compiled.resources.items() if k in kernels)
    try:
        listing, missing = sass_of(compiled, arch), None
    except sass.ToolMissing as exc:
        listing, missing = None, str(exc).split(". ")[0]
    ctx = Compiled(rung, compiled, listing, strip_comments(without_skeletons(source)))
    held, reported, skipped, problems = [], [], [], []
    for s in static:
        if s.sass and listing is None:
            skipped.append(s.what)
            continue
        outcome = s.test(ctx)
        if outcome is not None:
            problems.append(outcome)
        else:  # what held, by where it was read: the SASS, or nvcc's resource report
            (held if s.sass else reported).append(s.what)
    todo = todo_lines(source)
    head = f"nvcc compiled {name} for {arch} ({shown})."
    checked = ((f" Checked in the SASS: {'; '.join(held)}." if held else "")
               + (f" Checked in nvcc's report: {'; '.join(reported)}." if reported else ""))
    checked += (f" Not checked here ({missing}): {'; '.join(skipped)}." if missing and skipped
                else f" There is no SASS listing here ({missing})." if missing else "")
    todo_note = (f"Fill in the TODO regions: line(s) {_lines(todo)} still start with // TODO "
                 f"(delete each TODO line once you have written that part). " if todo else "")
    if problems:  # what is wrong first: a progress line shows the start of the message
        return failed(f"{todo_note}{'; '.join(problems)}. {head}{checked}"), None
    if todo:
        return failed(f"{todo_note}{head}{checked}"), None
    if reason is not None:
        blocked = cpu() if cpu is not None else "no CPU run was given"
        if blocked is None:
            return None, Inspected(arch, compiled, head, checked, on_cpu=True)
        twin_note = f" The CPU twin could not run it: {blocked}." if cpu is not None else ""
        return not_verified("no GPU here, so it was compiled and inspected but not run. "
                            f"{head}{checked}{twin_note} On a GPU this check runs it "
                            f"against {against}."), None
    return None, Inspected(arch, compiled, head, checked)


def _plain_race_note(listing, kernels) -> str:
    """What can be said of racecheck and synccheck for a kernel that is not a rung (its check has
    no one small call to run under compute-sanitizer): from its SASS, whether they have anything to
    look at."""
    if listing is None:
        return (" racecheck and synccheck were not run: a kernel that is not a rung has no one "
                "small call to run under compute-sanitizer")
    ins = [i for k in kernels if k in listing.functions for i in listing.functions[k].instructions]
    touched = _matching(ins, ("BAR", "LDS", "STS", "ATOMS", "WARPSYNC"))
    if not touched:
        return (" racecheck and synccheck were not run: its SASS has no barrier and no shared "
                "memory access, all they look at")
    return (" racecheck and synccheck were not run: a kernel that is not a rung has no one small "
            "call to run under compute-sanitizer, and its SASS has barriers or shared memory")


def check_plain_kernel(source, *, name: str, kernels, static=(), run=None,
                       against: str = "NumPy", cpu_run: Callable | None = None) -> Verdict:
    """A learner's kernel that is not a rung (lesson 09's ``scale_wide``): compiled from its text
    alone (``#line 1`` in front, so nvcc's line numbers are the text's), inspected as
    :func:`check_kernel` inspects a rung, and where a GPU works handed to ``run(module)`` (the
    loaded cubin, a PyCUDA module; it returns an :class:`Outcome`) in a child process
    (:func:`.kernel_child.run_plain_in_child`): a crash there is NOT YET with memcheck's line, and
    this process never launches the kernel. compute-sanitizer's racecheck and synccheck are not run
    (``run`` checks and times in one go, no one small call): the verdict says whether the SASS gives
    them anything to look at. Without a GPU, ``cpu_run(text)`` (the text with its ``#line 1`` in
    front; it returns an :class:`Outcome`) runs it on the CPU twin: PASS (on the CPU) or NOT YET;
    where there is none, or the twin cannot take the text: NOT VERIFIED, never PASS."""
    from ...inspection import sass

    if not isinstance(source, str) or not source.strip():
        return _not_text(source)
    listings = []

    def sass_of(compiled, arch):
        listings.append(sass.parse_sass(sass.nvdisasm_json(compiled.binary), name, arch))
        return listings[-1]

    stop, seen = inspect_text(
        source, name, kernels, static,
        lambda arch: build.compile_source(f'#line 1 "{name}"\n' + source, arch, name=name),
        sass_of, against=against,
        cpu=None if cpu_run is None else
        lambda: cpu_twin.why_not_text(f'#line 1 "{name}"\n' + source, name, kernels))
    if stop is not None:
        return stop
    if seen.on_cpu:
        outcome = cpu_run(f'#line 1 "{name}"\n' + source)
        if not outcome.ok:
            verdict = failed(f"on the CPU twin, {outcome.message}. {seen.head} {cpu_twin.CANNOT}.")
            verdict.kinds = outcome.kinds
            return verdict
        return passed(f"on the CPU twin, {outcome.message}. {seen.head}{seen.checked} "
                      f"{cpu_twin.CANNOT}.")
    if run is None:
        return not_verified(f"no way to run it was given. {seen.head}{seen.checked}")
    ran = kernel_child.run_plain_in_child(name, source, run)
    note = _plain_race_note(listings[-1] if listings else None, kernels)
    if not ran.outcome.ok:
        verdict = failed(f"{seen.head}{seen.checked} {ran.outcome.message}")
        verdict.kinds = ran.outcome.kinds
        return verdict
    return passed(f"{seen.head}{seen.checked} {ran.outcome.message}.{note}.")


def _judged_on_cpu(rung, name, head, checked, seed, rows_per_block, hints,
                   on_cpu: cpu_twin.OnCpu | None = None) -> Verdict:
    """PASS (on the CPU) or NOT YET from the CPU twin (:mod:`.cpu`), saying what it cannot
    judge (and, with ``on_cpu``, which build of the rung it ran)."""
    shapes = on_cpu.shapes if on_cpu is not None else cpu_twin.rungs.CHECK_SHAPES
    note = f" {on_cpu.note}." if on_cpu is not None and on_cpu.note else ""
    outcome = cpu_twin.run_checks_on_cpu(rung, seed=seed, rows_per_block=rows_per_block,
                                         hints=hints, shapes=shapes)
    if not outcome.ok:
        verdict = failed(f"on the CPU twin, {outcome.message}. {head}{note} {cpu_twin.CANNOT}.")
        verdict.kinds = outcome.kinds
        return verdict
    return passed(f"on the CPU twin, {name} {outcome.message}.{checked}{note} "
                  f"{cpu_twin.CANNOT}.")


def check_kernel(source, *, name: str, like=None, compare_with: str | None = None, shapes=None,
                 rows_per_block: int | None = None, static=(), hints=None,
                 sanitize: bool = True, sanitize_it: bool | None = None,
                 timing: bool = True, seed: int = 0, embed: Callable[[str], str] | None = None,
                 compare_config=None, compare_label: str | None = None,
                 on_cpu: cpu_twin.OnCpu | None = None, **fields) -> Verdict:
    """Register ``source`` as the rung ``name``, compile it, inspect it and (where a GPU works) run
    it: in a child process first, then (only where it passed there) the race check and the timing.

    ``like``: the shipped rung the learner's kernel stands in for (``"v3_smem"``): the learner's
    rung is a copy of it with the learner's text, and ``fields`` (``kernels``, ``plan``,
    ``block_size``, ...) say only what differs (without ``like``, they say all:
    :func:`rmsnorm_lessons.core.ladder.rung_from_source`).
    ``static``: the lesson's :class:`Static` checks; ``rows_per_block``: rows one block takes per
    step of its loop (default: warps per block), to name blocks in a diagnosis; ``hints``: extra
    sentences by diagnosis kind (e.g. ``{"dweight unchanged": "did the last block run?"}``);
    ``shapes``: the check's shapes (default :data:`SHAPES`, see :func:`shapes_for`);
    ``sanitize``: compute-sanitizer's racecheck and synccheck on one small call once the numbers
    are right (a hazard is NOT YET); ``sanitize=False`` skips it, for speed (``sanitize_it`` is the
    same switch under its older name);
    ``compare_with``: the shipped rung timed beside yours (default: ``like``), launched with
    ``compare_config`` and named ``compare_label``; ``timing=False`` skips the timing;
    ``embed``: splices the text into a shipped kernel (see :func:`register`); the TODO lines and the
    source checks still read the learner's text alone. ``on_cpu``: where there is no GPU, the build
    of the rung the CPU twin runs instead of the GPU's (:class:`.cpu.OnCpu`). Returns PASS, NOT YET
    or NOT VERIFIED (no GPU here, and the twin cannot run it).
    """
    if sanitize_it is not None:
        sanitize = sanitize_it
    if not isinstance(source, str) or not source.strip():
        return _not_text(source)
    rung = register(source, name=name, like=like, embed=embed, **fields)
    if compare_with is None:
        compare_with = ladder.get(like).name if like is not None else "v3_smem"
    from ...inspection import sass

    twin_rung = []  # the rung the twin runs, made only where there is no GPU

    def on_the_twin():
        twin_rung.append(on_cpu.rung(rung) if on_cpu is not None else rung)
        return cpu_twin.why_not(twin_rung[-1])

    stop, seen = inspect_text(source, name, rung.kernels, static,
                              lambda arch: build.compile_file(rung, arch),
                              lambda compiled, arch: sass.listing(rung, arch), rung=rung,
                              against="the float64 reference", cpu=on_the_twin)
    if stop is not None:
        return stop
    head, checked = seen.head, seen.checked
    if seen.on_cpu:
        return _judged_on_cpu(twin_rung[-1], name, head, checked, seed, rows_per_block, hints,
                              on_cpu)
    ran = kernel_child.run_in_child(rung, shapes_for(rung, shapes), seed=seed,
                                    rows_per_block=rows_per_block, hints=hints,
                                    time_shape=TIME_SHAPE if timing else None,
                                    text=f'#line 1 "{name}"\n' + source)
    outcome = ran.outcome
    if not outcome.ok:
        verdict = failed(f"{head} {outcome.message}")
        verdict.kinds = outcome.kinds
        return verdict
    extra = []
    if sanitize:
        found = kernel_running.sanitize_result(rung)
        if found.hazard:
            verdict = failed(f"{found.sentence}. The numbers were right ({name} "
                             f"{outcome.message}), but a race can change them on another run or "
                             "another GPU. "
                             f"{head}{checked}")
            verdict.kinds = ("race",)
            return verdict
        extra.append(found.sentence)
    if timing:
        try:
            extra.append(time_against(rung, compare_with, config=compare_config,
                                      label=compare_label))
        except Exception as exc:  # timing is a bonus: never turns a right kernel into a failure
            extra.append(f"(not timed: {type(exc).__name__}: {str(exc)[:200]})")
    return passed(f"{name} {outcome.message}.{checked} " + ". ".join(extra))
