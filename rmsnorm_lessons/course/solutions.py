"""What the learner writes, counted, and what a lesson must not show before they write it.

:func:`kernel_lines` counts the lines a learner writes in a kernel exercise by the rule of issue 41:
the non-blank lines inside the solution regions (``// ### BEGIN SOLUTION`` ... ``// ### END
SOLUTION``) of a cell tagged ``kernel-exercise``, comment-only lines not counted.
:func:`exercise_lines` does it for every such cell of a notebook.

:func:`leaks` finds a solution spelled out above its exercise: a line of the solution,
whitespace-normalised and at least :data:`MIN_CHARS` characters long, that appears in a cell before
the exercise, in its source or in a saved output. A line the exercise cell itself gives (outside
its solution regions) is no leak. Both read a notebook as a dict (nbformat 4).
"""
from __future__ import annotations

from dataclasses import dataclass

from . import student

#: the tag of a cell in which the learner writes a kernel
KERNEL_EXERCISE = "kernel-exercise"
#: the shortest solution line that counts as spelled out (``__syncthreads();`` is 16)
MIN_CHARS = 12


def normalise(text: str) -> str:
    """``text`` with every run of whitespace one space, and none at the ends."""
    return " ".join(text.split())


def code_parts(lines) -> list[tuple[str, str]]:
    """``(line, its code)`` of each line that holds code: not blank, not only a comment (``//``,
    or inside or on a ``/* ... */`` block); the code is the line without its comments."""
    out, in_block = [], False
    for line in lines:
        rest, code = line.strip(), ""
        while rest:
            if in_block:
                end = rest.find("*/")
                rest, in_block = ("", True) if end < 0 else (rest[end + 2:], False)
                continue
            if rest.startswith("//"):
                break
            if rest.startswith("/*"):
                rest, in_block = rest[2:], True
                continue
            cut = min([i for i in (rest.find("//"), rest.find("/*")) if i >= 0] or [len(rest)])
            code, rest = code + rest[:cut], rest[cut:]
        if code.strip():
            out.append((line, code))
    return out


def code_lines(lines) -> list[str]:
    """The lines that hold code (:func:`code_parts`), as they are."""
    return [line for line, _ in code_parts(lines)]


def kernel_lines(text: str) -> int:
    """The lines of code inside the solution regions of a cell's text."""
    return len(code_lines(student.solution_lines(text)))


@dataclass(frozen=True)
class ExerciseLines:
    """A kernel exercise: its cell's index (among all cells) and the lines the learner writes."""

    cell: int
    lines: int


def _cells(nb: dict) -> list:
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise ValueError("nb must be a notebook (a dict with a list of cells)")
    return nb["cells"]


def exercise_lines(nb: dict, tag: str = KERNEL_EXERCISE) -> list[ExerciseLines]:
    """Every cell tagged ``tag`` (a kernel exercise), with its lines of code to write."""
    return [ExerciseLines(i, kernel_lines(student._source(cell)))
            for i, cell in enumerate(_cells(nb))
            if cell.get("cell_type") == "code" and tag in student.tags(cell)]


@dataclass(frozen=True)
class Leak:
    """A solution line of the exercise in cell ``exercise`` shown in cell ``cell``'s ``where``
    (``"source"`` or ``"output"``)."""

    exercise: int
    cell: int
    where: str
    line: str

    def __str__(self) -> str:
        return (f"cell {self.cell}'s {self.where} spells out a line of the exercise in cell "
                f"{self.exercise}: {self.line}")


def _output_text(cell) -> str:
    parts = []
    for out in cell.get("outputs", []):
        for value in (out.get("text"), *(out.get("data", {}).get(k) for k in
                                         ("text/plain", "text/markdown", "text/html"))):
            if value:
                parts.append("".join(value) if isinstance(value, list) else value)
    return "\n".join(parts)


def answer_lines(text: str, min_chars: int = MIN_CHARS) -> list[str]:
    """The solution lines of an exercise's text that would give it away: their code (comments
    left out), at least ``min_chars`` long once whitespace-normalised, and not given by the cell
    itself."""
    given = {normalise(code) for _, code in code_parts(student.strip_solutions(text).split("\n"))}
    found = [normalise(code) for _, code in code_parts(student.solution_lines(text))]
    return list(dict.fromkeys(line for line in found
                              if len(line) >= min_chars and line not in given))


def leaks(nb: dict, min_chars: int = MIN_CHARS, tags=(KERNEL_EXERCISE,)) -> list[Leak]:
    """Each solution line of an exercise (a cell tagged one of ``tags``) that a cell above it
    shows, in its source or a saved output (whitespace-normalised, at least ``min_chars``
    characters)."""
    cells = _cells(nb)
    found = []
    for k, cell in enumerate(cells):
        if cell.get("cell_type") != "code" or not set(tags) & set(student.tags(cell)):
            continue
        answers = answer_lines(student._source(cell), min_chars)
        for i, above in enumerate(cells[:k]):
            for where, text in (("source", student._source(above)),
                                ("output", _output_text(above))):
                shown = normalise(text)
                found += [Leak(k, i, where, line) for line in answers if line in shown]
    return found
