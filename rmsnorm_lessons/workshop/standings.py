"""The standings of a room: one row per learner from their verdicts, the leaderboard, every exercise
of the course, who is stuck where (what the workshop hub's dashboard shows).

A learner writes their own verdicts file, so nothing in it is taken on trust beyond what a check can
write: only the exercises of the lesson registry count (a name outside it is counted apart, never
passed), a score counts only within what its check can produce (:data:`SCORE_RANGE`), and the
leaderboard ranks a score only where it was measured alone on the room's GPU, in a turn the room's
queue recorded for that learner (``turns``).
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from ..course import registry
from ..course.record import TUNING, is_prediction, latest
from ..lessons.lesson11 import tuning

#: what each scored check can produce: a score outside is not the check's (forged, or a fault)
SCORE_RANGE = {TUNING: (0.0, tuning.SCORE_MAX)}
#: a verdict is recorded when its cell ends, just after its GPU turn was given back
TURN_SLACK_S = 120


def exercises() -> list[str]:
    """Every exercise of the course, in course order (the registry's), with the tuning exercise
    (at the end where no lesson lists it)."""
    names = [e for lesson in registry.LESSONS for e in lesson.exercises]
    return names + ([] if TUNING in names else [TUNING])


def by_lesson() -> list[tuple[str, list[str]]]:
    """``(lesson stem, its exercises)`` in course order, the tuning exercise last as "tuning"
    where no lesson lists it."""
    groups = [(lesson.stem, list(lesson.exercises)) for lesson in registry.LESSONS
              if lesson.exercises]
    if not any(TUNING in e for _, e in groups):
        groups.append(("tuning", [TUNING]))
    return groups


def score_ok(exercise: str, score: float | None) -> bool:
    """Whether ``score`` is one ``exercise``'s check can produce (None: no score, fine)."""
    if score is None:
        return True
    low, high = SCORE_RANGE.get(exercise, (None, None))
    return low is not None and low < score <= high


@dataclass(frozen=True)
class Row:
    learner: str
    cells: dict  # exercise -> its last Record, for the registry's exercises tried
    last_time: str | None  # the learner's last attempt at anything
    passed: int  # of the registry's exercises
    prediction_error: float | None  # median of the last prediction errors recorded, None where none
    predicted: int = 0  # predictions (predict.<key>) whose last record is PREDICTED
    predictions: int = 0  # predictions measured, written or not
    unknown: int = 0  # names the registry does not have (not counted, not passed)
    out_of_range: int = 0  # scores no check can produce (not counted)
    stuck: str | None = None  # the exercise of their last attempt, where it is NOT YET
    attempts: dict = field(default_factory=dict)  # exercise -> how many tries


def room_rows(room: dict) -> list[Row]:
    """``room``: learner -> their records. One :class:`Row` per learner, in the room's order."""
    known = set(exercises())
    rows = []
    for learner, records in room.items():
        kept = [r for r in records if is_prediction(r.exercise)
                or (r.exercise in known and score_ok(r.exercise, r.score))]
        last = latest(kept)
        cells = {e: r for e, r in last.items() if e in known}
        errors = [r.prediction_error for r in last.values() if r.prediction_error is not None]
        guesses = [r for e, r in last.items() if is_prediction(e)]
        checks = [r for r in kept if not is_prediction(r.exercise)]
        attempts = {}
        for r in checks:
            attempts[r.exercise] = attempts.get(r.exercise, 0) + 1
        now = checks[-1] if checks else None
        rows.append(Row(
            learner, cells, max((r.time for r in kept), default=None),
            sum(r.status == "PASS" for r in cells.values()),
            statistics.median(errors) if errors else None,
            sum(r.status == "PREDICTED" for r in guesses), len(guesses),
            unknown=len({r.exercise for r in records
                         if not is_prediction(r.exercise) and r.exercise not in known}),
            out_of_range=sum(r.exercise in known and not score_ok(r.exercise, r.score)
                             for r in records),
            stuck=now.exercise if now is not None and now.status == "NOT YET" else None,
            attempts=attempts))
    return rows


def stuck(rows) -> list[tuple[str, list[str]]]:
    """``(exercise, learners)`` for each check learners are stuck on (their last attempt at
    anything, and it said NOT YET), the most learners first, then in course order."""
    order = {e: i for i, e in enumerate(exercises())}
    groups: dict[str, list[str]] = {}
    for row in rows:
        if row.stuck is not None:
            groups.setdefault(row.stuck, []).append(row.learner)
    return sorted(groups.items(), key=lambda g: (-len(g[1]), order.get(g[0], len(order))))


def label(exercise: str) -> str:
    """``lesson04.check_v3_kernel`` -> "lesson 04's v3_kernel check"."""
    module, _, check = exercise.partition(".")
    what = check.removeprefix("check_")
    if module.startswith("lesson") and module[6:].isdigit():
        return f"lesson {module[6:]}'s {what} check"
    return f"the {what} check"


def _in_turn(learner: str, r, turns: dict) -> bool:
    turn = turns.get(r.lease) if r.lease else None
    if not turn or turn.get("name") != learner:
        return False
    from datetime import datetime, timezone

    at = datetime.strptime(r.time, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()
    return turn["start"] - 1 <= at <= turn["end"] + TURN_SLACK_S


def leaderboard(room: dict, exercise: str = TUNING, turns: dict | None = None):
    """``(learner, best score, time of that attempt)`` at ``exercise`` for the learners with a
    score the check can produce, best first (ties: the earlier attempt first).

    ``turns``: lease -> the room queue's record of that GPU turn (``name``, ``start``, ``end``,
    epoch seconds); given, a score counts only when its lease is one of ``turns``, the learner's,
    and it was recorded within the turn (measured alone). Returns ``(board, not ranked)``: the
    board and, per learner, how many scores were left out because of that."""
    board, left_out = [], {}
    for learner, records in room.items():
        scored = [r for r in records if r.exercise == exercise and r.score is not None
                  and score_ok(exercise, r.score)]
        alone = scored if turns is None else [r for r in scored if _in_turn(learner, r, turns)]
        if len(alone) < len(scored):
            left_out[learner] = len(scored) - len(alone)
        if alone:
            best = min(alone, key=lambda r: (-r.score, r.time))
            board.append((learner, best.score, best.time))
    return sorted(board, key=lambda b: (-b[1], b[2])), left_out
