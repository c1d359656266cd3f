"""The standings of a room: one row per learner from their verdicts, the leaderboard, every exercise
of the course (what the workshop hub's dashboard shows)."""
from __future__ import annotations

import statistics
from dataclasses import dataclass

from ..course import registry
from ..course.record import TUNING, is_prediction, latest


def exercises() -> list[str]:
    """Every exercise of the course, in course order (the registry's), with the tuning exercise
    (at the end where no lesson lists it)."""
    names = [e for lesson in registry.LESSONS for e in lesson.exercises]
    return names + ([] if TUNING in names else [TUNING])

@dataclass(frozen=True)
class Row:
    learner: str
    cells: dict  # exercise -> its last Record, for the exercises tried
    last_time: str | None  # the learner's last attempt at anything
    passed: int
    prediction_error: float | None  # median of the last prediction errors recorded, None where none
    predicted: int = 0  # predictions (predict.<key>) whose last record is PREDICTED
    predictions: int = 0  # predictions measured, written or not

def room_rows(room: dict) -> list[Row]:
    """``room``: learner -> their records. One :class:`Row` per learner, in the room's order."""
    rows = []
    for learner, records in room.items():
        last = latest(records)
        errors = [r.prediction_error for r in last.values() if r.prediction_error is not None]
        guesses = [r for e, r in last.items() if is_prediction(e)]
        rows.append(Row(learner, last, max((r.time for r in records), default=None),
                        sum(r.status == "PASS" for r in last.values()),
                        statistics.median(errors) if errors else None,
                        sum(r.status == "PREDICTED" for r in guesses), len(guesses)))
    return rows

def leaderboard(room: dict, exercise: str = TUNING) -> list[tuple[str, float, str]]:
    """``(learner, best score, time of that attempt)`` at ``exercise`` for the learners with a
    score, best first (ties: the earlier attempt first)."""
    board = []
    for learner, records in room.items():
        scored = [r for r in records if r.exercise == exercise and r.score is not None]
        if scored:
            best = min(scored, key=lambda r: (-r.score, r.time))
            board.append((learner, best.score, best.time))
    return sorted(board, key=lambda b: (-b[1], b[2]))
