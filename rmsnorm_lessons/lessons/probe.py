"""A learner's CUDA text, probed: a small kernel of the lesson's own, appended to the learner's
text, calls one of the learner's functions (or one of their kernels runs) on inputs the lesson
chose, on the CPU twin (:mod:`rmsnorm_lessons.twin`), and hands back what it wrote.

Lessons 06 and 07 judge with it what a run on random inputs cannot see: the banks a layout's
shared atomics reach (lesson 06's ``staged()``, at every channel of several row widths) and the
order a sum adds its terms in (lesson 07's ``reduce_dweight_v5``, on terms whose sum depends on
it). Where the twin cannot run here (no g++, not Linux) a probe returns None and why; the kernel
check itself then says what it could not judge.
"""
from __future__ import annotations

import numpy as np


def run(text: str, kernel: str, *, grid: int, block: int, args, name: str):
    """``(arrays, None)``: the arrays of ``args`` after one launch of ``kernel`` (defined in
    ``text``) on the twin; or ``(None, why)`` where it could not run or did not finish."""
    from .. import twin

    why = twin.available()
    if why is not None:
        return None, why
    try:
        ran = twin.run_kernel(text, kernel, grid=grid, block=block, args=args, name=name,
                              hazards=False)
    except (twin.NeedsGPU, twin.TwinCompileError) as exc:
        return None, str(exc).strip().splitlines()[0][:300]
    if ran.stopped:  # a crash (a read past the end lands outside the process), or the time limit
        return None, (f"the probe stopped: {ran.hazards[0].text}" if ran.hazards else
                      "the probe did not finish (the twin's time limit)")
    return ran.arrays, None


#: where a GPU's PASS is checked for accesses out of bounds on the CPU twin: odd N, C no multiple
#: of a row's chunks (a warp past N, or a chunk past a row's end, in the last block)
BOUNDS_SHAPES = ((129, 1600, None),)


def bounds_after_gpu(verdict, name: str, rung_of=None, shapes=BOUNDS_SHAPES):
    """A kernel exercise's GPU verdict with every access checked on the CPU twin too: a read past
    a buffer that lands in memory the process owns neither crashes the GPU run nor changes its
    numbers, and the GPU check runs no memcheck. A PASS from a GPU whose rung ``name`` (the twin
    runs ``rung_of(rung)`` where given: lesson 10's register path) reads or writes out of bounds
    on the twin at ``shapes`` becomes NOT YET, saying where; a clean one says it was checked; where
    the twin cannot run, the PASS stands and says so. Other verdicts (and the twin's own, without
    a GPU, which checked every access already) come back as they are."""
    from .. import twin
    from ..core import gpu, ladder
    from ..course.checking import cpu as cpu_twin
    from ..course.verdict import failed, passed

    if not verdict.passed or gpu.why_unavailable() is not None:
        return verdict
    head = verdict.message.rstrip()
    head += "" if head.endswith(".") else "."
    rung = ladder.get(name)
    why = twin.available()
    if why is None:
        try:
            rung = rung_of(rung) if rung_of is not None else rung
        except ValueError as exc:
            why = str(exc)
    why = why or cpu_twin.why_not(rung)
    if why is not None:
        return passed(f"{head} Accesses out of bounds were not checked (the CPU twin: {why}).")
    found = cpu_twin.run_checks_on_cpu(rung, shapes=shapes)
    at = ", ".join(f"{n}x{c}" for n, c, _ in shapes)
    if found.ok:
        return passed(f"{head} Every access in bounds (on the CPU twin at {at}, which checks each "
                      "one).")
    out = failed(f"on the CPU twin, {found.message}. The GPU run's numbers were right, but the GPU "
                 "does not see an access out of bounds that lands in memory the process owns; "
                 f"the twin checks each one. {head}")
    out.kinds = found.kinds
    return out


def index_expressions(code: str, array: str) -> list[tuple[int, str]]:
    """``(line, index text)`` of every element of ``array`` that ``code`` reaches: ``array[i]``
    and ``array + i`` (up to the ``,`` or ``)`` that ends the argument); an empty ``[]`` (a
    declaration) and the bare name (``zero_block_shared(array, C)``) are not elements."""
    import re

    found = []
    for m in re.finditer(rf"\b{re.escape(array)}\s*(\[|\+)", code):
        start, depth, j = m.end(), 0, m.end()
        closing = "]" if m.group(1) == "[" else None
        while j < len(code):
            ch = code[j]
            if ch in "([{":
                depth += 1
            elif ch in ")]}":
                if depth == 0:
                    break
                depth -= 1
            elif ch in ",;" and depth == 0 and closing is None:
                break
            j += 1
        index = code[start:j].strip()
        if index:
            found.append((code.count("\n", 0, m.start()) + 1, index))
    return found


def through(code: str, index: str, function: str) -> bool:
    """Whether ``index`` is computed by ``function(...)``: it calls it, or it is a name that
    ``code`` assigns from it."""
    import re

    if re.search(rf"\b{function}\s*\(", index):
        return True
    return bool(re.fullmatch(r"\w+", index)) and re.search(
        rf"\b{index}\s*=\s*{function}\s*\(", code) is not None


def float32_in_order(terms: np.ndarray) -> np.ndarray:
    """Each column of ``terms`` (rows: terms in order) summed in float32, first row first."""
    total = np.zeros(terms.shape[1], np.float32)
    for row in terms.astype(np.float32):
        total = (total + row).astype(np.float32)
    return total
