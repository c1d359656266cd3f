"""Three bugs for lesson 13, each one edit away from a shipped rung, and the compute-sanitizer tool
that finds it.

* ``bug_race_v5``: v5_two_pass without the ``__syncthreads()`` between the warps' stores to the
  staging buffer and warp 0's reads of it: warp 0 may add up contributions before they are written.
  racecheck. (A barrier missing between v3's shared-memory atomics and its flush is just as wrong,
  but racecheck does not report hazards with atomics: on the H200 it reported 0 for that edit while
  the check failed.)
* ``bug_tail_v2``: v2_warp's second column loop runs to ``c <= C``: one element past each row, which
  is the next row's first (wrong results) and, on the last row, past the end of the buffer.
  memcheck.
* ``bug_seed_loop_v6``: v6_last_block with the seed's row loop (``for row = warp's first; row < N;
  row += warps in the grid``) in place of its block-uniform one: where N is not a multiple of the
  grid's warps (N = 8200 on a 132-SM H200: 264 blocks x 16 warps = 4224), some warps of a block
  leave the loop while the others wait at its ``__syncthreads``. synccheck.

Each is the shipped source with one text edit (:func:`source` stops if the edit does not apply
exactly once, so a change to ``kernels/*.cu`` shows here), registered as a rung with the shipped
rung's plan. Where the edited text lives in a header of kernels/ that the rung includes (v5's and
v6's row pass is in ``bf16_row_pass.cuh``), the bug's source has that header's text in place of its
``#include``, so the edit reaches only the bug's rung.
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from ...core import build, ladder


@dataclass(frozen=True)
class Bug:
    name: str
    shipped: str  # the rung it is made from
    old: str  # the shipped text the edit replaces
    new: str  # what replaces it
    # the edit applies to the last occurrence of ``old`` (v2's loop header appears twice)
    last: bool
    tool: str  # the compute-sanitizer tool that finds it
    shape: tuple  # (N, C) where the tool finds it
    what: str  # one line: the bug


BUGS = {b.name: b for b in (
    Bug("bug_race_v5", "v5_two_pass",
        "                if (warp != 0) store128(staging + threadIdx.x * f128::size, contrib);\n"
        "                __syncthreads();\n",
        "                if (warp != 0) store128(staging + threadIdx.x * f128::size, contrib);\n",
        False, "racecheck", (129, 776), "the barrier between the warps' staging stores and warp "
                                        "0's reads is gone"),
    Bug("bug_tail_v2", "v2_warp",
        "    for (int c = lane; c < C; c += WARP_SIZE) {\n",
        "    for (int c = lane; c <= C; c += WARP_SIZE) {\n",
        True, "memcheck", (129, 776), "the update loop runs one element past the end of the row"),
    Bug("bug_seed_loop_v6", "v6_last_block",
        "    for (long long first = (long long)blockIdx.x * warps; first < N;\n"
        "         first += (long long)gridDim.x * warps) {\n"
        "        const long long row = first + warp;\n"
        "        const bool active = row < N;  // warp-uniform\n",
        "    for (long long first = (long long)blockIdx.x * warps; first + warp < N;\n"
        "         first += (long long)gridDim.x * warps) {\n"
        "        const long long row = first + warp;\n"
        "        const bool active = true;\n",
        False, "synccheck", (8200, 768), "the seed's per-warp row loop, with a __syncthreads "
                                         "inside it"),
)}


def get(name: str) -> Bug:
    if name not in BUGS:
        raise ValueError(f"bug must be one of {', '.join(BUGS)}, not {name!r}")
    return BUGS[name]


_INCLUDE = re.compile(r'^#include "([^"]+)"\n', re.M)


def shipped_text(name: str) -> str:
    """The shipped rung's text, with each header of kernels/ that holds the bug's edit pasted in
    place of its ``#include`` (without its ``#pragma once``)."""
    bug = get(name)
    text = build.kernel_source(bug.shipped)
    if bug.old in text:
        return text
    for match in _INCLUDE.finditer(text):
        header = build.kernel_source(match.group(1))
        if bug.old in header:
            header = header.replace("#pragma once\n", "", 1)
            return text[:match.start()] + header + text[match.end():]
    return text


def source(name: str) -> str:
    """The shipped kernel's text with the bug's edit applied (exactly once, else ValueError)."""
    bug = get(name)
    text = shipped_text(name)
    count = text.count(bug.old)
    if count == 0 or (count > 1 and not bug.last):
        raise ValueError(f"{name}: the edit applies {count} times, not once: "
                         f"kernels/{bug.shipped}.cu or a header it includes changed?")
    at = text.rfind(bug.old)
    return text[:at] + bug.new + text[at + len(bug.old):]


def diff(name: str, context: int = 2) -> str:
    """The bug as a unified diff against the shipped ``kernels/<rung>.cu`` (with the header that
    holds the edit pasted in, as :func:`shipped_text` does)."""
    bug = get(name)
    before = shipped_text(name).splitlines(keepends=True)
    after = source(name).splitlines(keepends=True)
    return "".join(difflib.unified_diff(before, after, f"kernels/{bug.shipped}.cu", f"{name}.cu",
                                        n=context))


def rung(name: str) -> ladder.Rung:
    """The bug as a registered rung (the shipped rung's plan, kernels, dtype and limits)."""
    bug = get(name)
    spec = ladder.get(bug.shipped)
    return ladder.rung_from_source(name=name, source=source(name), plan=spec.plan,
                                   kernels=spec.kernels,
                                   dtype=spec.dtype, adds=f"{bug.shipped} with a bug: {bug.what}",
                                   c_multiple=spec.c_multiple, block_size=spec.block_size,
                                   max_block=spec.max_block,
                                   shared_memory=spec.shared_memory, defines=spec.defines)


def sanitize(name: str, tool: str | None = None, timeout: float = 600):
    """compute-sanitizer's ``tool`` (the bug's own by default) on one call at the bug's shape: a
    :class:`rmsnorm_lessons.inspection.sanitizer.Report`. Needs compute-sanitizer and a GPU."""
    from ...inspection import sanitizer

    bug = get(name)
    return sanitizer.run(rung(name), tool or bug.tool, bug.shape, timeout=timeout)
