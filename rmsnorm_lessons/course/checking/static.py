"""The static checks of a learner's kernel: what the compiled code tells without running it.

A :class:`Static` check looks at a :class:`Compiled` (the rung, nvcc's result, the SASS listing and
the learner's text): an opcode present or absent in the SASS, one before another, no local memory, a
pattern absent from the text. The text helpers find the learner's ``// TODO`` lines outside the
skeleton blocks. :mod:`~rmsnorm_lessons.course.checking.kernel` runs these checks.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from ...core import build, ladder

#: the opcodes of an atomic on global memory: REDG when its result is unused (atomicAdd), ATOMG
#: otherwise
GLOBAL_ATOMICS = ("RED", "REDG", "ATOM", "ATOMG")
SKELETON_BLOCK = re.compile(r"^[ \t]*#if 0\b[^\n]*BEGIN SKELETON[^\n]*\n.*?"
                            r"^[ \t]*#endif\b[^\n]*END SKELETON[^\n]*$", re.S | re.M)
_TODO = re.compile(r"^\s*//\s*TODO\b")


@dataclass
class Compiled:
    """What the static checks look at: the rung, nvcc's result, and the SASS (None where cuobjdump
    is missing)."""

    rung: ladder.Rung
    compiled: build.Compiled
    listing: object  # rmsnorm_lessons.inspection.sass.Listing or None
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
    """One static check: ``what`` says what it looks for (shown when it holds), ``test`` returns
    None when it holds and the sentence to show otherwise. ``sass``: needs the SASS listing
    (cuobjdump)."""

    what: str
    test: Callable
    sass: bool = True


def _matching(instructions, prefix):
    """Instructions whose opcode is ``prefix`` or starts with ``prefix.``;
    ``"LDG.128"``/``"STG.128"`` match any 128-bit LDG/STG (``LDG.E.EF.128``); a tuple of prefixes
    matches any of them."""
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


def sass_has(prefix: str, what: str, hint: str, kernel: str | None = None,
             at_least: int = 1) -> Static:
    """The SASS of ``kernel`` (all kernels: None) holds at least ``at_least`` instructions whose
    opcode is
    ``prefix`` or starts with ``prefix.`` (``"SHFL.BFLY"``, ``"MEMBAR"``, ``"LDG.E.128"``, ...)."""

    def test(c: Compiled):
        n = len(_matching(c.instructions(kernel), prefix))
        if n >= at_least:
            return None
        return (f"{hint} (the SASS{' of ' + kernel if kernel else ''} has {n} {_name(prefix)}, "
                f"expected at least {at_least})")

    return Static(what, test)


def sass_lacks(prefix: str, what: str, hint: str, kernel: str | None = None) -> Static:
    def test(c: Compiled):
        n = len(_matching(c.instructions(kernel), prefix))
        return None if n == 0 else (f"{hint} (the SASS{' of ' + kernel if kernel else ''} has {n} "
                                    f"{_name(prefix)})")

    return Static(what, test)


def sass_before(first: str, then: str, what: str, hint: str, kernel: str | None = None) -> Static:
    """An instruction ``first`` comes before the first ``then`` in the code of ``kernel``."""

    def test(c: Compiled):
        ins = c.instructions(kernel)
        later = _matching(ins, then)
        if not later:  # nothing to order yet: the check of `then` itself says what is missing
            return (f"{what}: not checked, there is no {_name(then)} in the "
                    f"SASS{' of ' + kernel if kernel else ''} yet")
        earlier = [i for i in _matching(ins, first) if i.offset < later[0].offset]
        return None if earlier else (f"{hint} (no {_name(first)} before the first {_name(then)} in "
                                     "the SASS)")

    return Static(what, test)


def sass_between(first: str, middle: str, then: str, what: str, hint: str,
                 kernel: str | None = None) -> Static:
    """An instruction ``middle`` comes after some ``first`` and before the first ``then`` in the
    code of ``kernel`` (a barrier between a fence and the atomic that publishes its writes)."""

    def test(c: Compiled):
        ins = c.instructions(kernel)
        later = _matching(ins, then)
        if not later:  # nothing to order yet: the check of `then` itself says what is missing
            return (f"{what}: not checked, there is no {_name(then)} in the "
                    f"SASS{' of ' + kernel if kernel else ''} yet")
        fences = [i.offset for i in _matching(ins, first) if i.offset < later[0].offset]
        between = [i for i in _matching(ins, middle)
                   if fences and fences[0] < i.offset < later[0].offset]
        return None if between else (f"{hint} (no {_name(middle)} between the {_name(first)} and "
                                     f"the first {_name(then)} in the SASS)")

    return Static(what, test)


def no_local_memory(kernel: str | None = None) -> Static:
    def test(c: Compiled):
        spills = [r for k, r in c.compiled.resources.items() if (kernel is None or k == kernel)
                  and r.spills]
        local = _matching(c.instructions(kernel), "LDL") + _matching(c.instructions(kernel), "STL")
        if not spills and not local:
            return None
        return (f"the kernel uses local memory ({len(local)} LDL/STL; spills: "
                f"{', '.join(r.kernel for r in spills) or 'none'}): a local array indexed at run "
                "time, or too many registers; keep per-thread values in registers (#pragma unroll "
                "over constant bounds)")

    return Static("no local memory (no LDL/STL, no spills)", test, sass=False)


def source_lacks(pattern: str, what: str, hint: str) -> Static:
    """The learner's text (comments stripped) does not match the regular expression ``pattern``."""

    def test(c: Compiled):
        return hint if re.search(pattern, c.text) else None

    return Static(what, test, sass=False)


# --------------------------------------------------------------------------------------------------
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
    """Line numbers (1 = the first line of the text) of ``// TODO`` lines outside skeleton
    blocks."""
    return [i for i, line in enumerate(without_skeletons(source).splitlines(), 1)
            if _TODO.match(line)]


def nvcc_errors(message: str, stem: str, keep: int = 8) -> str:
    """nvcc's errors in ``message`` (a :class:`~rmsnorm_lessons.core.build.CompileError`'s text),
    one a line,
    ``line 12: ...`` for lines of the learner's text
    (:meth:`~rmsnorm_lessons.core.build.CompileError.summary`)."""
    return build.CompileError(message).summary(keep=keep, stem=stem)
