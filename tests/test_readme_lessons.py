"""README.md's lesson table is what tools/readme_lessons.py renders from the registry (CPU)."""
import dataclasses
import importlib.util
import re
from pathlib import Path

import pytest

from rmsnorm_lessons.core import project
from rmsnorm_lessons.course.registry import LESSONS

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def tool():
    path = ROOT / "tools" / "readme_lessons.py"
    spec = importlib.util.spec_from_file_location("readme_lessons", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_lesson_table_is_the_registry(tool):
    assert tool.readme_block() == tool.render(), (
        "README.md's lesson table differs from rmsnorm_lessons/course/registry.py: "
        "run python tools/readme_lessons.py --write")


def test_the_first_screen_says_what_this_is_the_lessons_the_commands_and_what_you_need():
    lines = (ROOT / "README.md").read_text().splitlines()
    screen = lines[:40]
    long = [(i + 1, len(line)) for i, line in enumerate(screen) if len(line) > 200]
    assert not long, f"README lines over 200 characters in the first 40 (line, length): {long}"
    assert "<!-- lessons:start -->" in screen[:15] and "<!-- lessons:end -->" in screen
    text = "\n".join(screen)
    assert "CUDA kernel" in text and "RMSNorm" in text  # what this is
    assert re.search(r"^make lab +# .*learner's edition", text, re.M)
    assert re.search(r"^make test +# the check that the set-up works", text, re.M)
    assert "**You need**" in text and "NVIDIA GPU" in text and "Python 3.10" in text


def test_render_has_one_row_a_lesson_and_the_totals(tool):
    text = tool.render()
    rows = [line for line in text.splitlines() if line.startswith("| ") and "][s" in line]
    assert len(rows) == len(LESSONS)
    for row, lesson in zip(rows, LESSONS):
        cells = [c.strip() for c in row.strip("|").split("|")]
        n = lesson.number
        assert cells == [n, f"[{lesson.title}][s{n}]", lesson.kernel, str(lesson.minutes),
                         f"[![Open in Colab][colab]][c{n}] [instructor's edition][i{n}]"]
    flat = " ".join(text.split())
    total = sum(lesson.minutes for lesson in LESSONS)
    kernels = sum(1 for lesson in LESSONS if lesson.kernel_exercise)
    assert f"in {kernels} of the {len(LESSONS)} lessons" in flat
    assert f"add up to {total} minutes" in flat and "[Binder][binder]" in flat


def test_the_links_open_the_learners_edition_and_name_the_instructors(tool):
    links = dict(line.split(": ", 1) for line in tool.render_links().splitlines())
    assert links["[colab]"] == tool.COLAB_BADGE
    assert links["[binder]"] == project.binder_url() and "labpath=student/" in links["[binder]"]
    assert len(links) == 2 + 3 * len(LESSONS)
    for lesson in LESSONS:
        n = lesson.number
        assert links[f"[s{n}]"] == f"student/{lesson.notebook}"
        assert links[f"[c{n}]"] == project.colab_url(lesson.stem)
        assert links[f"[c{n}]"].endswith(f"/blob/main/student/{lesson.notebook}")
        assert links[f"[i{n}]"] == f"notebooks/{lesson.notebook}"
        assert (ROOT / "notebooks" / lesson.notebook).is_file()
    assert tool.readme_links_block() == tool.render_links(), (
        "README.md's lesson links differ: run python tools/readme_lessons.py --write")


def test_render_follows_a_changed_registry_and_refuses_a_pipe(tool):
    changed = (dataclasses.replace(LESSONS[0], minutes=LESSONS[0].minutes + 7),) + LESSONS[1:]
    assert tool.render(changed) != tool.render()
    assert f"| {LESSONS[0].minutes + 7} |" in tool.render(changed)
    for broken in (dataclasses.replace(LESSONS[0], kernel="a | b"),
                   dataclasses.replace(LESSONS[0], title="a] b")):
        with pytest.raises(ValueError, match="'\\|' or '\\]' would split"):
            tool.render((broken,))
    with pytest.raises(ValueError, match="empty"):
        tool.render(())


def test_readme_schedule_is_the_plan(tool):
    assert tool.readme_schedule_block() == tool.render_schedule(), (
        "README.md's schedule differs from rmsnorm_lessons/course/schedule.py's plan: "
        "run python tools/readme_lessons.py --write")


def test_schedule_rows_are_the_lessons_with_minutes_and_prerequisites(tool):
    text = tool.render_schedule()
    rows = [line for line in text.splitlines() if line.startswith("| ") and "notebooks/" in line]
    assert len(rows) == len(LESSONS)
    for row, lesson in zip(rows, LESSONS):
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[1] == f"[`{lesson.stem}`](notebooks/{lesson.notebook}) {lesson.title}"
        assert cells[2] == str(lesson.minutes)
        assert cells[3] == (", ".join(p[:2] for p in lesson.prerequisites) or "-")
    assert text.count("**Day ") == 2 and "The rule: lessons in course order" in " ".join(
        text.split())


def test_check_and_write(tool, tmp_path, monkeypatch, capsys):
    readme = tmp_path / "README.md"
    readme.write_text("# x\n\n<!-- lessons:start -->\nold\n<!-- lessons:end -->\n\nrest\n"
                      "<!-- schedule:start -->\nold\n<!-- schedule:end -->\nend\n"
                      "<!-- lesson-links:start -->\nold\n<!-- lesson-links:end -->\n")
    monkeypatch.setattr(tool, "README", readme)
    assert tool.main(["--check"]) == 1
    assert "lesson table, schedule, lesson links differ" in capsys.readouterr().err
    assert tool.main(["--write"]) == 0
    assert tool.main(["--check"]) == 0
    text = readme.read_text()
    assert text.startswith("# x\n\n<!-- lessons:start -->\n| # |")
    assert "<!-- lessons:end -->\n\nrest\n<!-- schedule:start -->\nThe rule: " in text
    assert "<!-- schedule:end -->\nend\n<!-- lesson-links:start -->\n[colab]: " in text
    assert text.endswith("<!-- lesson-links:end -->\n")
    readme.write_text(text.replace("| 60 |", "| 61 |", 1))
    assert tool.main(["--check"]) == 1
    assert "lesson table differs" in capsys.readouterr().err
    readme.write_text("# no markers\n")
    with pytest.raises(SystemExit, match="no '<!-- lessons:start -->'"):
        tool.main(["--check"])
    readme.write_text("<!-- lessons:start -->\n<!-- lessons:end -->\n")
    with pytest.raises(SystemExit, match="no '<!-- schedule:start -->'"):
        tool.main(["--check"])
