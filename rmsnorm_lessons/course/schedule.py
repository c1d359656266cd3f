"""A two-day workshop plan from the lesson registry's minutes, prerequisites and sessions.

The rule (:data:`RULE`): the lessons whose session is ``"workshop"`` stay in course order; day 1
takes the first ones, day 2 the rest, split where both days hold at most :data:`DAY_MINUTES` of
lessons and the two days are most even. A day starts at 09:00; lessons are :data:`BREAK_MINUTES`
apart, and the first gap after :data:`LUNCH_AFTER` minutes of lessons is an hour's lunch instead.
The ``"prework"`` lessons are taken before day 1 (the plan counts them as done), the
``"optional"`` ones after day 2; neither takes a slot.

    >>> from rmsnorm_lessons import schedule
    >>> day1, day2 = schedule.two_day_plan()
    >>> day1.minutes <= schedule.DAY_MINUTES and day2.minutes <= schedule.DAY_MINUTES
    True
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from .registry import LESSONS, SESSIONS, Lesson

__all__ = ["DAY_MINUTES", "Day", "RULE", "Slot", "clock", "in_session", "plan_markdown",
           "two_day_plan"]

DAY_MINUTES = 7 * 60   # lessons a day, breaks not counted
DAY_START = 9 * 60     # 09:00
BREAK_MINUTES = 15
LUNCH_MINUTES = 60
LUNCH_AFTER = 3 * 60   # minutes of lessons before the lunch gap
RULE = (f"lessons in course order, at most {DAY_MINUTES // 60} hours of lessons a day, the two "
        f"days as even as possible; each day starts at {DAY_START // 60:02d}:00 with "
        f"{BREAK_MINUTES} minutes between lessons and a {LUNCH_MINUTES}-minute lunch at the first "
        f"gap after {LUNCH_AFTER // 60} hours of lessons; the pre-work lessons are taken before "
        f"day 1 and the optional ones after day 2")


@dataclass(frozen=True)
class Slot:
    lesson: Lesson
    start: int  # minutes after midnight
    end: int


@dataclass(frozen=True)
class Day:
    number: int
    slots: tuple[Slot, ...]
    lunch: int | None  # when lunch starts (minutes after midnight), if the day has one

    @property
    def minutes(self) -> int:
        """Minutes of lessons, breaks not counted."""
        return sum(slot.lesson.minutes for slot in self.slots)

    @property
    def start(self) -> int:
        return self.slots[0].start

    @property
    def end(self) -> int:
        return self.slots[-1].end


def clock(minutes: int) -> str:
    """``"HH:MM"`` of minutes after midnight."""
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def in_session(lessons: Sequence[Lesson], session: str) -> tuple[Lesson, ...]:
    """The lessons of ``session`` (``"prework"``, ``"workshop"`` or ``"optional"``), in course
    order."""
    if session not in SESSIONS:
        raise ValueError(f"session must be one of {', '.join(SESSIONS)}, not {session!r}")
    return tuple(lesson for lesson in lessons if lesson.session == session)


def check_order(lessons: Sequence[Lesson]) -> None:
    """Refuse a list in which a lesson comes before one of its prerequisites (or names a stem that
    is not a lesson here), a pre-work lesson needs one that is not pre-work, or a workshop lesson
    needs an optional one: each session is taken after the one before it."""
    seen: dict[str, Lesson] = {}
    rank = {session: i for i, session in enumerate(SESSIONS)}
    for lesson in lessons:
        if lesson.minutes <= 0:
            raise ValueError(f"lesson {lesson.stem}: minutes must be positive, not "
                             f"{lesson.minutes}")
        for need in lesson.prerequisites:
            if need not in seen:
                raise ValueError(f"lesson {lesson.stem}: prerequisite {need!r} is not a lesson "
                                 f"before it")
            if rank[seen[need].session] > rank[lesson.session]:
                raise ValueError(f"lesson {lesson.stem} ({lesson.session}): prerequisite {need!r} "
                                 f"is {seen[need].session}, taken after it")
        seen[lesson.stem] = lesson


def _day(number: int, lessons: Sequence[Lesson]) -> Day:
    slots, now, taught, lunch = [], DAY_START, 0, None
    for i, lesson in enumerate(lessons):
        if i:
            if lunch is None and taught >= LUNCH_AFTER:
                lunch = now
                now += LUNCH_MINUTES
            else:
                now += BREAK_MINUTES
        slots.append(Slot(lesson, now, now + lesson.minutes))
        now += lesson.minutes
        taught += lesson.minutes
    return Day(number, tuple(slots), lunch)


def two_day_plan(lessons: Sequence[Lesson] = LESSONS,
                 day_minutes: int = DAY_MINUTES) -> tuple[Day, Day]:
    """The workshop lessons over two days by :data:`RULE` (the pre-work ones count as done, the
    optional ones are left out); a ValueError names what makes it impossible."""
    lessons = tuple(lessons)
    if day_minutes <= 0:
        raise ValueError(f"day_minutes must be positive, not {day_minutes}")
    check_order(lessons)
    lessons = in_session(lessons, "workshop")
    if len(lessons) < 2:
        raise ValueError(f"lessons: two days need at least two workshop lessons, not "
                         f"{len(lessons)}")
    total = sum(lesson.minutes for lesson in lessons)
    best = None
    for split in range(1, len(lessons)):
        first = sum(lesson.minutes for lesson in lessons[:split])
        if first <= day_minutes and total - first <= day_minutes:
            if best is None or abs(total - 2 * first) < abs(total - 2 * best[1]):
                best = (split, first)
    if best is None:
        raise ValueError(f"the workshop lessons add up to {total} minutes: no split in course "
                         f"order gives "
                         f"two days of at most {day_minutes} minutes of lessons each")
    return _day(1, lessons[:best[0]]), _day(2, lessons[best[0]:])


def _hours(minutes: int) -> str:
    return f"{minutes // 60} h {minutes % 60:02d}" if minutes % 60 else f"{minutes // 60} h"


HEAD = ("| time | lesson | min | needs |", "| --- | --- | ---: | --- |")


def _row(time: str, lesson: Lesson, link: Callable[[Lesson], str]) -> str:
    if "|" in lesson.title:
        raise ValueError(f"lesson {lesson.stem}: '|' in its title would split its row")
    after = ", ".join(need[:2] for need in lesson.prerequisites) or "-"
    return (f"| {time} | [`{lesson.stem}`]({link(lesson)}) {lesson.title} | {lesson.minutes} | "
            f"{after} |")


def _apart(lessons: Sequence[Lesson], session: str, time: str, words: str,
           link: Callable[[Lesson], str]) -> list[str]:
    """The lines of the lessons of ``session`` taken outside the two days: a line, then a table
    whose time column says ``time``; none where the session has no lesson."""
    chosen = in_session(lessons, session)
    if not chosen:
        return []
    minutes = sum(lesson.minutes for lesson in chosen)
    return (["", f"{words}: {len(chosen)} lesson{'s' if len(chosen) > 1 else ''}, {minutes} "
                 f"minutes ({_hours(minutes)}).", ""] + list(HEAD)
            + [_row(time, lesson, link) for lesson in chosen])


def plan_markdown(link: Callable[[Lesson], str], lessons: Sequence[Lesson] = LESSONS) -> str:
    """The plan as Markdown: the rule; the pre-work lessons; per day a line and a table (time,
    lesson, minutes, prerequisites, by number); the optional lessons. ``link(lesson)`` is the
    address a lesson's name points to."""
    lines = [f"The rule: {RULE}."]
    lines += _apart(lessons, "prework", "before day 1", "**Before day 1** (pre-work)", link)
    for day in two_day_plan(lessons):
        lunch = f", lunch at {clock(day.lunch)}" if day.lunch is not None else ""
        lines += ["", f"**Day {day.number}**, {clock(day.start)} to {clock(day.end)}: "
                      f"{len(day.slots)} lessons, {day.minutes} minutes of lessons "
                      f"({_hours(day.minutes)}){lunch}.", ""] + list(HEAD)
        lines += [_row(f"{clock(slot.start)}-{clock(slot.end)}", slot.lesson, link)
                  for slot in day.slots]
    lines += _apart(lessons, "optional", "after day 2", "**After the workshop** (optional)", link)
    return "\n".join(lines)
