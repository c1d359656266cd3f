"""Automatic checks for the lessons' exercises: one module per lesson, each check returns a Verdict.

A check never raises on a wrong answer: it returns ``Verdict(passed=False, message=...)`` saying what is
wrong, and displays as one line in a notebook. Tests feed each check a wrong answer and assert it fails.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Verdict:
    passed: bool
    message: str

    def __str__(self) -> str:
        return ("PASS: " if self.passed else "NOT YET: ") + self.message

    def _repr_pretty_(self, p, cycle):  # IPython shows the sentence, not the dataclass
        p.text(str(self))

    def __bool__(self) -> bool:
        return self.passed


def passed(message: str) -> Verdict:
    return Verdict(True, message)


def failed(message: str) -> Verdict:
    return Verdict(False, message)
