"""The README's lesson table and two-day schedule, rendered from the lesson registry
(rmsnorm_lessons/course/registry.py; the plan is rmsnorm_lessons/course/schedule.py's).

    python tools/readme_lessons.py            # print what the README should hold
    python tools/readme_lessons.py --check    # exit 1 if README.md holds something else
    python tools/readme_lessons.py --write    # rewrite README.md between the markers

README.md holds the table between ``<!-- lessons:start -->`` and ``<!-- lessons:end -->``, the
schedule between ``<!-- schedule:start -->`` and ``<!-- schedule:end -->``, and the table's
reference links (its badges' and notebooks' addresses, kept off the first screen) between
``<!-- lesson-links:start -->`` and ``<!-- lesson-links:end -->`` at the end;
tests/test_readme_lessons.py fails when one differs from what this renders, so a lesson added
to, or changed in, the registry reaches the front page with ``--write``.
"""
from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
START, END = "<!-- lessons:start -->", "<!-- lessons:end -->"
SCHEDULE_START, SCHEDULE_END = "<!-- schedule:start -->", "<!-- schedule:end -->"
LINKS_START, LINKS_END = "<!-- lesson-links:start -->", "<!-- lesson-links:end -->"
WIDTH = 105
COLAB_BADGE = "https://colab.research.google.com/assets/colab-badge.svg"


def render(lessons=None) -> str:
    """The table (one row a lesson: number, title linked to its learner's edition in student/,
    kernel, minutes, its Colab badge and its instructor's edition, each a short reference link
    that :func:`render_links` defines) and one line under it: how many lessons have you write a
    kernel, the time in all, and Binder."""
    sys.path.insert(0, str(ROOT))
    if lessons is None:
        from rmsnorm_lessons.course.registry import LESSONS as lessons
    if not lessons:
        raise ValueError("lessons: the registry is empty")
    rows = ["| # | lesson (the learner's edition) | kernel | min | open |",
            "| --- | --- | --- | ---: | --- |"]
    for lesson in lessons:
        if "|" in lesson.kernel + lesson.title or "]" in lesson.title:
            raise ValueError(f"lesson {lesson.stem}: '|' or ']' would split its row of the table")
        n = lesson.number
        rows.append(f"| {n} | [{lesson.title}][s{n}] | {lesson.kernel} | {lesson.minutes} "
                    f"| [![Open in Colab][colab]][c{n}] [instructor's edition][i{n}] |")
    minutes = sum(lesson.minutes for lesson in lessons)
    kernels = sum(1 for lesson in lessons if lesson.kernel_exercise)
    line = (f"You write and check a CUDA kernel of your own in {kernels} of the {len(lessons)} "
            f"lessons; the lessons' own estimates add up to {minutes} minutes "
            f"(about {round(minutes / 60)} hours). Without a GPU, [Binder][binder] opens them too.")
    return "\n".join(rows + [""] + textwrap.wrap(line, WIDTH, break_on_hyphens=False))


def render_links(lessons=None) -> str:
    """The reference links the table uses, at the README's end: per lesson its learner's edition
    (``s00``), that edition in Colab (``c00``, built by rmsnorm_lessons.core.project from
    pyproject.toml's [project.urls]) and its instructor's edition (``i00``); the badge and
    Binder."""
    sys.path.insert(0, str(ROOT))
    from rmsnorm_lessons.core import project

    if lessons is None:
        from rmsnorm_lessons.course.registry import LESSONS as lessons
    student, instructor = project.EDITIONS["student"], project.EDITIONS["instructor"]
    lines = [f"[colab]: {COLAB_BADGE}", f"[binder]: {project.binder_url()}"]
    for lesson in lessons:
        n = lesson.number
        lines += [f"[s{n}]: {student}/{lesson.notebook}",
                  f"[c{n}]: {project.colab_url(lesson.stem)}",
                  f"[i{n}]: {instructor}/{lesson.notebook}"]
    return "\n".join(lines)


def render_schedule(lessons=None) -> str:
    """The two-day plan (rmsnorm_lessons.course.schedule): its rule, then per day the lessons with
    their times, minutes and prerequisites, each linked to its notebook."""
    sys.path.insert(0, str(ROOT))
    from rmsnorm_lessons.course import schedule

    if lessons is None:
        from rmsnorm_lessons.course.registry import LESSONS as lessons
    text = schedule.plan_markdown(lambda lesson: f"notebooks/{lesson.notebook}", lessons)
    return "\n".join(line if line.startswith("|") else "\n".join(
        textwrap.wrap(line, WIDTH, break_on_hyphens=False)) for line in text.split("\n"))


def _split(text: str, start_mark: str = START, end_mark: str = END):
    start = text.find(start_mark)
    end = text.find(end_mark, start + len(start_mark)) if start >= 0 else -1
    if start < 0 or end < 0:
        raise SystemExit(f"README.md has no '{start_mark}' ... '{end_mark}' block")
    return (text[:start + len(start_mark)], text[start + len(start_mark):end].strip("\n"),
            text[end:])


def readme_block(readme: Path = README) -> str:
    return _split(readme.read_text())[1]


def readme_schedule_block(readme: Path = README) -> str:
    return _split(readme.read_text(), SCHEDULE_START, SCHEDULE_END)[1]


def readme_links_block(readme: Path = README) -> str:
    return _split(readme.read_text(), LINKS_START, LINKS_END)[1]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite README.md between the markers")
    mode.add_argument("--check", action="store_true",
                      help="exit 1 if README.md differs from the rendering")
    args = parser.parse_args(argv)
    blocks = (("lesson table", START, END, render()),
              ("schedule", SCHEDULE_START, SCHEDULE_END, render_schedule()),
              ("lesson links", LINKS_START, LINKS_END, render_links()))
    if not (args.write or args.check):
        print("\n\n".join(rendered for *_, rendered in blocks))
        return 0
    text, differ = README.read_text(), []
    for name, start, end, rendered in blocks:
        before, inside, after = _split(text, start, end)
        if inside != rendered:
            differ.append(name)
        text = f"{before}\n{rendered}\n{after}"
    if args.write:
        README.write_text(text)
        print("README.md: lesson table, schedule and links rendered from the registry")
    elif differ:
        verb = "differ" if len(differ) > 1 else "differs"
        print(f"README.md's {', '.join(differ)} {verb} from the registry: "
              "run python tools/readme_lessons.py --write", file=sys.stderr)
        return 1
    else:
        print("README.md's lesson table, schedule and links are the registry's")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
