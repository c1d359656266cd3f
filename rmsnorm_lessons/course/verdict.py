"""Automatic checks for the lessons' exercises: one module per lesson, each check returns a Verdict.

A check never raises on a wrong answer: it returns ``Verdict(passed=False, message=...)`` saying
what is wrong, and displays as one line in a notebook. Tests feed each check a wrong answer and
assert it fails.
"""
from __future__ import annotations

import ast
import linecache
import math
import sys
from dataclasses import dataclass

#: the three words a verdict starts with (``progress`` counts them)
STATES = ("PASS", "NOT YET", "NOT VERIFIED")


@dataclass
class Verdict:
    """``PASS`` (checked and right), ``NOT YET`` (checked and wrong, or unfinished) or ``NOT
    VERIFIED`` (``verified=False``: nothing found wrong, but the decisive check needs what is
    missing here, a GPU). A NOT VERIFIED verdict is never passed: ``bool(verdict)`` is True for PASS
    only. ``score``: the check's figure where it measures one (the tuning exercise: % of the
    same-bytes ceiling), which the hub's dashboard ranks; the message says it too. ``lease``: the
    workshop room's GPU turn the figure was measured in (:mod:`rmsnorm_lessons.speed.gpu_turn`),
    None where it was not measured alone in one."""

    passed: bool
    message: str
    verified: bool = True
    score: float | None = None
    lease: str | None = None

    def __post_init__(self):
        if self.passed and not self.verified:
            raise ValueError("a verdict that was not verified cannot pass")
        score = self.score
        if score is not None and (isinstance(score, bool) or not isinstance(score, (int, float))
                                  or not math.isfinite(score)):
            raise ValueError(f"a verdict's score must be a finite number or None, got {score!r}")

    @property
    def status(self) -> str:
        return "PASS" if self.passed else ("NOT YET" if self.verified else "NOT VERIFIED")

    def __str__(self) -> str:
        return f"{self.status}: {self.message}"

    def _repr_pretty_(self, p, cycle):  # IPython shows the sentence, not the dataclass
        p.text(str(self))

    def __bool__(self) -> bool:
        return self.passed


def passed(message: str) -> Verdict:
    return Verdict(True, message)


def failed(message: str) -> Verdict:
    return Verdict(False, message)


def not_verified(message: str) -> Verdict:
    """Nothing found wrong, but not run: e.g. a kernel compiled where there is no GPU."""
    return Verdict(False, message, verified=False)


def learner_name(param: str | None = None, value=None) -> str | None:
    """The name the learner's cell gave the check now running, for its parameter ``param`` (or
    the one parameter that holds ``value``): ``sectors_v1`` for ``check_sectors``'s ``v1`` when
    the cell reads ``lesson02.check_sectors(sectors_v1, sectors_v2)``. Read from the calling
    cell's text (IPython keeps a cell's text in linecache); None where the text is not there, the
    call is not found or the argument is not a plain name."""
    frame = sys._getframe(1)
    while frame is not None and not frame.f_code.co_name.startswith("check_"):
        frame = frame.f_back
    if frame is None or frame.f_back is None:
        return None
    code, caller = frame.f_code, frame.f_back
    params = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
    held = [param] if param in params else [
        p for p in params if frame.f_locals.get(p, object()) is value]
    try:
        tree = ast.parse("".join(linecache.getlines(caller.f_code.co_filename, caller.f_globals)))
    except (SyntaxError, ValueError):
        return None
    for node in ast.walk(tree):
        func = getattr(node, "func", None)
        called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if (not isinstance(node, ast.Call) or called != code.co_name
                or not node.lineno <= caller.f_lineno <= (node.end_lineno or node.lineno)):
            continue
        given = dict(zip(params[:code.co_argcount], node.args))
        given.update((k.arg, k.value) for k in node.keywords if k.arg)
        names = {given[p].id for p in held if isinstance(given.get(p), ast.Name)}
        return names.pop() if len(names) == 1 else None  # one name given, or none is sure
    return None


def _placeholder(answer, missing: str, label: str | None = None) -> Verdict:
    """"replace the ... of <the learner's name> <missing>": the name the cell gave the answer
    where it can be read (:func:`learner_name`), in place of the check's own label."""
    who = learner_name(label, answer)
    if who:
        words = missing.split(" ", 2)
        if words[0] == "of" and len(words) == 3:  # "of v1 with your answer": the check's label
            missing = f"of {who} {words[2]}"
        else:
            missing = f"of {who} {missing}"
    return failed(f"replace {'None' if answer is None else 'the ...'} {missing}")


def read_number(answer, missing: str, whole: bool = False, name: str | None = None):
    """The learner's numeric answer as ``(value, None)``, or ``(None, verdict)`` saying what to give
    instead.

    ``None`` and ``...`` (the placeholders the notebooks leave) mean "not answered yet", and the
    verdict reads "replace None <missing>" (or "replace the ... <missing>"), naming the variable
    the learner's cell passed (``name``: the check's parameter; :func:`learner_name`); ``whole``
    asks for an integer (``8.0`` is accepted as 8, ``8.5`` is not).
    """
    if answer is None or answer is Ellipsis:
        return None, _placeholder(answer, missing, name)
    try:
        value = None if isinstance(answer, (str, bytes)) else float(answer)
    except (TypeError, ValueError, OverflowError):
        value = None
    if value is None or (whole and (not math.isfinite(value) or value != int(value))):
        return None, failed(f"give {'a whole number' if whole else 'a number'}, got {answer!r}")
    return (int(value) if whole else value), None


def read_choice(answer, options):
    """The learner's pick among ``options`` (letters, e.g. ``"abc"``) as ``(letter, None)``, or
    ``(None, verdict)`` saying what to give instead. Case and spaces do not matter."""
    letters = [str(o).lower() for o in options]
    listed = ", ".join(f'"{o}"' for o in letters)
    if answer is None or answer is Ellipsis:
        return None, _placeholder(answer, f"with one of {listed}")
    pick = answer.strip().lower() if isinstance(answer, str) else None
    if pick not in letters:
        return None, failed(f"give one of {listed}, got {answer!r}")
    return pick, None


def choice_verdict(answer, right: str, why_not: dict, why: str) -> Verdict:
    """A choice question's verdict: PASS with ``why`` for ``right``, else the reason the pick is
    wrong (``why_not[letter]``) without naming the right one."""
    pick, verdict = read_choice(answer, sorted({right, *why_not}))
    if verdict is not None:
        return verdict
    return passed(f"{pick}: {why}") if pick == right else failed(f"{pick} is not it: "
                                                                 f"{why_not[pick]}")


def read_numbers(answers, missing: str, whole: bool = False):
    """Several numeric answers at once: ``answers`` is ``((value, name), ...)``; ``missing`` may say
    ``{name}``. Returns ``(values, None)``, or ``(None, verdict)`` for the first one that is not a
    number."""
    values = []
    for value, name in answers:
        got, verdict = read_number(value, missing.format(name=name), whole=whole, name=name)
        if verdict is not None:
            return None, verdict
        values.append(got)
    return values, None


def call_answer(fn, *args, at: str = ""):
    """Call the learner's function: ``(result, None)``, or ``(None, verdict)`` when it raised or
    returned None. ``at`` names the case in the message (e.g. ``"at stride 4"``)."""
    try:
        got = fn(*args)
    except Exception as exc:  # a learner's function may raise anything
        return None, failed(f"your function raised {type(exc).__name__}: {exc}"
                            + (f" ({at})" if at else ""))
    if got is None:
        return None, failed("your function returns None: fill it in")
    return got, None
