"""The lesson registry (rmsnorm_lessons/course/registry.py) against the notebooks and the package it
names."""
import json
import re

import pytest

from rmsnorm_lessons import lessons
from rmsnorm_lessons.core import ladder
from rmsnorm_lessons.course import registry

CALL = re.compile(r"\b(lesson\d\d|tuning)\.(check_\w+)\(")


def _calls(lesson):
    names = []
    for cell in json.loads(lesson.path.read_text())["cells"]:
        if cell["cell_type"] == "code":
            for m in CALL.finditer("".join(cell["source"])):
                name = f"{m.group(1)}.{m.group(2)}"
                if name not in names:
                    names.append(name)
    return names


def test_one_row_per_notebook_in_order():
    stems = sorted(p.stem for p in registry.notebook_dir().glob("[0-9][0-9]_*.ipynb"))
    assert [lesson.stem for lesson in registry.LESSONS] == stems


@pytest.mark.parametrize("lesson", registry.LESSONS, ids=lambda lesson: lesson.stem)
def test_row_names_what_its_notebook_calls(lesson):
    assert list(lesson.exercises) == _calls(lesson)
    for name in lesson.exercises:
        module, function = name.split(".")
        assert module in (f"lesson{lesson.number}", "tuning")
        assert callable(lessons.check_function(name))
    assert lesson.kernel_exercise is None or lesson.kernel_exercise in lesson.exercises
    if lesson.rung is not None:
        assert registry.building(ladder.get(lesson.rung).name) is lesson
        assert lesson.rung in lesson.kernel


def test_lookup_by_stem_and_refusal():
    assert registry.by_stem("04_shared_memory.ipynb").rung == "v3_smem"
    with pytest.raises(ValueError, match="no lesson '99_nothing'"):
        registry.by_stem("99_nothing")
    assert [lesson.number for lesson in registry.kernel_exercises()] == [
        "02", "03", "04", "05", "06", "07", "08", "09", "10", "13"]


def test_prerequisites_are_earlier_lessons():
    seen = []
    for lesson in registry.LESSONS:
        assert len(set(lesson.prerequisites)) == len(lesson.prerequisites), lesson.stem
        for need in lesson.prerequisites:
            assert need in seen, f"{lesson.stem} needs {need}, which is not a lesson before it"
        seen.append(lesson.stem)
    assert any(lesson.prerequisites for lesson in registry.LESSONS)


def _plan_holds(days, given, limit):
    """``days`` plan the workshop lessons of ``given`` in order, each day within ``limit``; the
    pre-work lessons count as done before day 1."""
    from rmsnorm_lessons.course import schedule

    planned = [slot.lesson for day in days for slot in day.slots]
    assert planned == [lesson for lesson in given if lesson.session == "workshop"], (
        "every workshop lesson once, in course order")
    before = {lesson.stem for lesson in given if lesson.session == "prework"}
    for day in days:
        assert day.minutes <= limit
        assert day.slots[0].start == schedule.DAY_START
        for slot, nxt in zip(day.slots, day.slots[1:] + (None,)):
            assert slot.end - slot.start == slot.lesson.minutes
            assert set(slot.lesson.prerequisites) <= before, slot.lesson.stem
            before.add(slot.lesson.stem)
            if nxt is not None:
                gap = nxt.start - slot.end
                expected = (schedule.LUNCH_MINUTES if day.lunch == slot.end
                            else schedule.BREAK_MINUTES)
                assert gap == expected
    return planned


def test_sessions_pre_work_first_and_optional_last():
    sessions = [lesson.session for lesson in registry.LESSONS]
    assert set(sessions) <= set(registry.SESSIONS)
    # 00 and 01 before day 1; 12 and 13 after day 2 (issue 41's plan, section 9)
    assert [lesson.number for lesson in registry.LESSONS if lesson.session == "prework"] == [
        "00", "01"]
    assert [lesson.number for lesson in registry.LESSONS if lesson.session == "optional"] == [
        "12", "13"]
    assert sessions == sorted(sessions, key=registry.SESSIONS.index), "sessions in course order"
    with pytest.raises(ValueError, match="session must be one of prework, workshop, optional"):
        registry.Lesson("99_x", "x", "-", "x", (), 10, session="evening")


def test_two_day_plan_covers_the_workshop_in_order_within_each_day():
    from rmsnorm_lessons.course import schedule

    days = schedule.two_day_plan()
    assert [day.number for day in days] == [1, 2]
    _plan_holds(days, registry.LESSONS, schedule.DAY_MINUTES)
    first, second = (day.minutes for day in days)
    total = first + second
    workshop = schedule.in_session(registry.LESSONS, "workshop")
    # the most even split in course order: no other split point is closer to half and fits
    cut = len(days[0].slots)
    for k in range(1, len(workshop)):
        left = sum(lesson.minutes for lesson in workshop[:k])
        if left <= schedule.DAY_MINUTES and total - left <= schedule.DAY_MINUTES:
            assert abs(total - 2 * first) <= abs(total - 2 * left), (k, cut)


def test_two_day_plan_follows_a_changed_registry_and_refuses_the_impossible():
    import dataclasses

    from rmsnorm_lessons.course import schedule

    rows = tuple(dataclasses.replace(lesson, minutes=30) for lesson in registry.LESSONS)
    days = schedule.two_day_plan(rows)
    _plan_holds(days, rows, schedule.DAY_MINUTES)
    assert abs(days[0].minutes - days[1].minutes) <= 30
    # every lesson in the workshop: all of them planned, 00 first
    every = tuple(dataclasses.replace(lesson, minutes=30, session="workshop") for lesson in rows)
    days = schedule.two_day_plan(every)
    assert [s.lesson.stem for d in days for s in d.slots] == [r.stem for r in every]
    swapped = (registry.LESSONS[0], registry.LESSONS[3], registry.LESSONS[2])
    with pytest.raises(ValueError, match="prerequisite '02_naive' is not a lesson before it"):
        schedule.two_day_plan(swapped)
    workshop = sum(lesson.minutes for lesson in schedule.in_session(registry.LESSONS, "workshop"))
    with pytest.raises(ValueError, match=f"workshop lessons add up to {workshop} minutes: no "
                                         "split in course order"):
        schedule.two_day_plan(registry.LESSONS, day_minutes=(workshop - 1) // 2)
    with pytest.raises(ValueError, match="at least two workshop lessons, not 1"):
        schedule.two_day_plan(registry.LESSONS[:3])
    with pytest.raises(ValueError, match="minutes must be positive"):
        schedule.two_day_plan((dataclasses.replace(registry.LESSONS[0], minutes=0),
                               registry.LESSONS[1]))
    # a session may need only lessons of its own or an earlier session
    late = dataclasses.replace(registry.LESSONS[2], session="optional")
    with pytest.raises(ValueError, match="03_warp_per_row .workshop.: prerequisite '02_naive' "
                                         "is optional, taken after it"):
        schedule.two_day_plan(registry.LESSONS[:2] + (late,) + registry.LESSONS[3:])
    early = dataclasses.replace(registry.LESSONS[2], session="prework")
    with pytest.raises(ValueError, match="02_naive .prework.: prerequisite .* taken after it"):
        schedule.two_day_plan((registry.LESSONS[0],
                               dataclasses.replace(registry.LESSONS[1], session="workshop"),
                               early) + registry.LESSONS[3:])
    with pytest.raises(ValueError, match="session must be one of"):
        schedule.in_session(registry.LESSONS, "weekend")
    assert schedule.clock(9 * 60 + 5) == "09:05"


def test_plan_markdown_lists_pre_work_days_and_optional_in_that_order():
    from rmsnorm_lessons.course import schedule

    text = schedule.plan_markdown(lambda lesson: lesson.notebook)
    order = [text.index(words) for words in ("**Before day 1** (pre-work)", "**Day 1**",
                                             "**Day 2**", "**After the workshop** (optional)")]
    assert order == sorted(order)
    for lesson in registry.LESSONS:
        time = {"prework": "before day 1", "optional": "after day 2"}.get(lesson.session)
        row = next(line for line in text.splitlines() if f"[`{lesson.stem}`]" in line)
        if time is not None:
            assert row.startswith(f"| {time} |"), row
    prework = [lesson for lesson in registry.LESSONS if lesson.session == "prework"]
    assert (f"2 lessons, {sum(lesson.minutes for lesson in prework)} minutes" in
            text.split("**Day 1**")[0])
