"""The student edition gives nothing away before the attempt (issue 27): no saved output shows a
solution line or a numeric answer; each lesson 02-10 asks for a prediction before it measures; our
kernel is revealed only after the learner's check; in lessons 00-03, not even a shorter solution
line or an answer in the markdown, and every numeric exercise carries its answers.

Read without running anything (CPU): the shipped notebooks, and notebooks made up here to test the
detectors themselves."""
from __future__ import annotations

import html
import json
import re

import pytest
from _lesson_support import STEMS_00_03
from _lesson_support import notebook as _nb
from _lesson_support import source_text as _text
from _lesson_support import tags as _tags

from rmsnorm_lessons.course import registry, student

LESSONS = [lesson.stem for lesson in registry.LESSONS]
PREDICTING = [lesson.stem for lesson in registry.LESSONS if "02" <= lesson.number <= "12"]
MIN_CHARS = 16  # a solution line this long (spaces not counted) is not a coincidence
TEXT_TYPES = ("text/plain", "text/html", "text/markdown")
GUESS = re.compile(r"(?:(\w+)\s*=\s*)?\brl\.predict\.guess\(\s*[\"'](\d\d\.[a-z0-9_]+)[\"']")
VERSUS = re.compile(r"\bpredict\.versus\(\s*(?:[\"'](\d\d\.[a-z0-9_]+)[\"']|(\w+))")
REVEAL = re.compile(r"\bcompare_with_ours\(\s*(\w+)")


def _src(cell) -> str:
    return _text(cell.get("source"))


def outputs_text(cell) -> list[str]:
    """Each text a code cell's saved outputs show (a %%gpu cell's too: they are what it shows where
    there is no GPU)."""
    texts = []
    for out in cell.get("outputs", []) if cell.get("cell_type") == "code" else []:
        texts.append(_text(out.get("text")))
        for kind in TEXT_TYPES:
            value = _text(out.get("data", {}).get(kind))
            texts.append(html.unescape(value) if kind == "text/html" else value)
        texts.append(_text(out.get("evalue")) + "\n" + "\n".join(out.get("traceback", [])))
    return [t for t in texts if t.strip()]


def _visible_lines(st: dict) -> set:
    """The stripped lines the student edition's own sources and markdown already show."""
    return {line.strip() for c in st["cells"] for line in _src(c).split("\n")}


def leaked_lines(nb: dict, st: dict) -> list[str]:
    """Where the student edition's outputs show a line of a solution region: "cell N: line"."""
    visible = _visible_lines(st)
    secret = {line.strip() for c in nb["cells"] if c.get("cell_type") == "code"
              for line in student.solution_lines(_src(c))}
    secret = {s for s in secret - visible if len(re.sub(r"\s", "", s)) >= MIN_CHARS}
    found = []
    for i, cell in enumerate(st["cells"]):
        for text in outputs_text(cell):
            shown = {line.strip() for line in text.split("\n")}
            found += [f"cell {i}: {s}" for s in sorted(secret) if s in shown or s in text]
    return list(dict.fromkeys(found))


def answers_of(nb: dict) -> list[tuple[int, str]]:
    """(cell index, answer) for each string of a solution cell's metadata answers."""
    out = []
    for i, cell in enumerate(nb["cells"]):
        meta = cell.get("metadata", {}).get("rmsnorm_lessons", {})
        if student.has_solution(_src(cell)):
            for answer in meta.get("answers", []) if isinstance(meta, dict) else []:
                assert isinstance(answer, str) and answer.strip(), (i, answer)
                out.append((i, answer))
    return out


def leaked_answers(nb: dict, st: dict) -> list[str]:
    """Where an answer of the metadata appears in an output or a markdown cell of ``st`` (not as
    part of a longer number or word)."""
    found = []
    for where, answer in answers_of(nb):
        rx = re.compile(r"(?<![\w.])" + re.escape(answer) + r"(?![\w]|\.\d)")
        for i, cell in enumerate(st["cells"]):
            texts = [_src(cell)] if cell.get("cell_type") == "markdown" else outputs_text(cell)
            if any(rx.search(t) for t in texts):
                found.append(f"cell {i} ({cell['cell_type']}): {answer!r}, the answer of cell "
                             f"{where}")
    return found


def _lesson(stem):
    nb = json.loads(registry.by_stem(stem).path.read_text(encoding="utf-8"))
    return nb, student.student_notebook(nb)


@pytest.mark.parametrize("stem", LESSONS)
def test_no_output_of_the_student_edition_shows_a_solution_line(stem):
    nb, st = _lesson(stem)
    found = leaked_lines(nb, st)
    assert not found, f"{stem}.ipynb (student edition) shows solution lines:\n" + "\n".join(found)


@pytest.mark.parametrize("stem", LESSONS)
def test_no_output_or_markdown_of_the_student_edition_shows_an_answer(stem):
    nb, st = _lesson(stem)
    found = leaked_answers(nb, st)
    assert not found, f"{stem}.ipynb (student edition) shows answers:\n" + "\n".join(found)


def predictions_measured(nb: dict, number: str) -> tuple[list[str], list[str]]:
    """(keys guessed in cells tagged ``prediction`` and measured by a later ``versus`` call, what
    is wrong: a guess outside a prediction cell, a key of another lesson)."""
    guessed, problems, measured = {}, [], []
    for i, cell in enumerate(nb["cells"]):
        if cell.get("cell_type") != "code":
            continue
        text = _src(cell)
        for var, key in GUESS.findall(text):
            if "prediction" not in student.tags(cell):
                problems.append(f"cell {i}: guess {key} in a cell not tagged prediction")
            if key[:2] != number:
                problems.append(f"cell {i}: key {key} is not of lesson {number}")
            guessed[key] = key
            if var:
                guessed[var] = key
        for key, var in VERSUS.findall(text):
            if (key or var) in guessed:
                measured.append(guessed[key or var])
    return list(dict.fromkeys(measured)), problems


@pytest.mark.parametrize("stem", PREDICTING)
def test_each_lesson_02_to_09_predicts_before_it_measures(stem):
    nb, _ = _lesson(stem)
    measured, problems = predictions_measured(nb, stem[:2])
    assert not problems, f"{stem}.ipynb:\n" + "\n".join(problems)
    assert measured, (f"{stem}.ipynb: no cell tagged prediction (rl.predict.guess) followed by "
                      f"rl.predict.versus with its key")


def misplaced_reveals(nb: dict) -> list[str]:
    """Each reveal that does not come after the check cell binding the verdict it is given, and
    each compare_with_ours outside a cell tagged reveal."""
    bound_by_check: set = set()
    problems = []
    for i, cell in enumerate(nb["cells"]):
        if cell.get("cell_type") != "code":
            continue
        text = _src(cell)
        calls = REVEAL.findall(text)
        if calls and "reveal" not in student.tags(cell):
            problems.append(f"cell {i}: compare_with_ours in a cell not tagged reveal")
        if "reveal" in student.tags(cell):
            if not calls:
                problems.append(f"cell {i}: tagged reveal but calls no compare_with_ours")
            problems += [f"cell {i}: reveals {name!r} before a check cell binds it"
                         for name in calls if name not in bound_by_check]
        if student.check_calls(text):
            bound_by_check.update(re.findall(r"^\s*(\w+)\s*=[^=]", text, re.M))
    return problems


@pytest.mark.parametrize("stem", LESSONS)
def test_every_reveal_comes_after_its_check(stem):
    nb, _ = _lesson(stem)
    problems = misplaced_reveals(nb)
    assert not problems, f"{stem}.ipynb:\n" + "\n".join(problems)


# --- the detectors, on notebooks made here -------------------------------------------------------

def _code(source, outputs=(), tags=(), meta=None):
    cell = {"cell_type": "code", "metadata": {"tags": list(tags)}, "source": source,
            "execution_count": 1, "outputs": [dict(o) for o in outputs]}
    if meta:
        cell["metadata"]["rmsnorm_lessons"] = meta
    return cell


def _stream(text):
    return {"output_type": "stream", "name": "stdout", "text": text}


KERNEL = ('kernel = r"""\n__global__ void k(float* y, const float* x, int n) {\n'
          "    // ### BEGIN SOLUTION\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
          "    if (i < n) y[i] = 2.0f * x[i];\n    // ### END SOLUTION\n"
          "#if 0 // ### BEGIN SKELETON\n    // TODO: y = 2 x\n#endif // ### END SKELETON\n}\n"
          '"""')


def _made(shown_above: str, answer_in: str = "", reveal_tag=True):
    return {"cells": [
        _code("print(rl.build.kernel_source('x'))", [_stream(shown_above)]),
        _code(KERNEL), _code("verdict = lesson02.check_x(kernel)", [_stream("PASS: ok\n")]),
        _code("rl.notebook.compare_with_ours(verdict, 'x')",
              [_stream("Ours:\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n")],
              ["reveal"] if reveal_tag else []),
        _code("answer = None\n### BEGIN SOLUTION\nanswer = 1 / 8\n### END SOLUTION",
              meta={"answers": ["0.125", "1/8"]}),
        {"cell_type": "markdown", "metadata": {}, "source": answer_in}],
        "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def test_a_printed_kernel_above_the_exercise_is_caught_with_its_cell_and_line():
    nb = _made("__global__ void k(...) {\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n}")
    assert leaked_lines(nb, student.student_notebook(nb)) == [
        "cell 0: int i = blockIdx.x * blockDim.x + threadIdx.x;"]
    # short lines and lines the student edition shows in its own sources are no secret
    nb = _made("    if (i < n) y[i] = 2.0f * x[i];\n}")
    assert leaked_lines(nb, student.student_notebook(nb)) == [
        "cell 0: if (i < n) y[i] = 2.0f * x[i];"]
    nb = _made("__global__ void k(float* y, const float* x, int n) {\n")
    assert leaked_lines(nb, student.student_notebook(nb)) == []


def test_a_reveal_cell_is_cleared_so_it_gives_nothing_away():
    nb = _made("nothing\n")
    assert leaked_lines(nb, student.student_notebook(nb)) == []
    nb = _made("nothing\n", reveal_tag=False)
    assert leaked_lines(nb, student.student_notebook(nb)) == [
        "cell 3: int i = blockIdx.x * blockDim.x + threadIdx.x;"]
    assert misplaced_reveals(nb) == ["cell 3: compare_with_ours in a cell not tagged reveal"]


def test_an_answer_in_markdown_or_an_output_is_caught():
    nb = _made("nothing\n", answer_in="So the ratio is 0.125 here.")
    assert leaked_answers(nb, student.student_notebook(nb)) == [
        "cell 5 (markdown): '0.125', the answer of cell 4"]
    nb = _made("ratio 1/8\n", answer_in="ratios 10.125 and 0.1250 are other numbers")
    assert leaked_answers(nb, student.student_notebook(nb)) == [
        "cell 0 (code): '1/8', the answer of cell 4"]


def test_a_reveal_before_its_check_is_caught():
    nb = _made("nothing\n")
    assert misplaced_reveals(nb) == []
    nb["cells"][2], nb["cells"][3] = nb["cells"][3], nb["cells"][2]
    assert misplaced_reveals(nb) == ["cell 2: reveals 'verdict' before a check cell binds it"]


def test_a_prediction_is_matched_to_its_measurement():
    guess = _code("mine = rl.predict.guess('02.v1_ms', ms=...)", tags=["prediction"])
    nb = {"cells": [guess, _code("rl.predict.versus(mine, ms=t.ms)")]}
    assert predictions_measured(nb, "02") == (["02.v1_ms"], [])
    nb = {"cells": [guess, _code("rl.predict.versus('02.v1_ms', ms=t.ms)")]}
    assert predictions_measured(nb, "02") == (["02.v1_ms"], [])
    nb = {"cells": [_code("rl.predict.versus(mine, ms=t.ms)"), guess]}
    assert predictions_measured(nb, "02") == ([], [])
    untagged = _code("mine = rl.predict.guess('03.v1_ms', ms=...)")
    assert predictions_measured({"cells": [untagged]}, "02")[1] == [
        "cell 0: guess 03.v1_ms in a cell not tagged prediction",
        "cell 0: key 03.v1_ms is not of lesson 02"]


# --- lessons 00-03: no solution line or answer, and every numeric exercise carries its answers ----


def _outputs(cell):
    return "\n".join(_text(o.get("text")) + _text(o.get("data", {}).get("text/plain"))
                     for o in cell.get("outputs", []))


def _solution_lines(cells):
    """Every line of code inside a solution region, stripped (markers and comments left out)."""
    found = set()
    for cell in cells:
        inside = False
        for line in _text(cell["source"]).splitlines():
            if "BEGIN SOLUTION" in line or "END SOLUTION" in line:
                inside = "BEGIN" in line
            elif inside:
                code = line.split("//")[0].split("#")[0].strip()
                if len(code) >= 12:
                    found.add(code)
    return found


@pytest.mark.parametrize("stem", STEMS_00_03)
def test_student_edition_shows_no_solution_line_or_numeric_answer(stem):
    nb = _nb(stem)
    lines = _solution_lines(nb["cells"])
    answers = [a for c in nb["cells"]
               for a in c.get("metadata", {}).get("rmsnorm_lessons", {}).get("answers", [])]
    shown = []
    for i, cell in enumerate(student.student_notebook(nb)["cells"]):
        if "reveal" in _tags(cell) or "prediction" in _tags(cell):
            continue  # the student edition clears these (tested with the student edition itself)
        if cell["cell_type"] == "markdown":  # the question's own prose may name the definitions
            shown += [(i, a) for a in answers if a in _text(cell["source"])]
        else:
            shown += [(i, s) for s in lines | set(answers) if s in _outputs(cell)]
    assert not shown, shown


@pytest.mark.parametrize("stem,count", [("00_setup", 5), ("02_naive", 6)])
def test_numeric_exercises_carry_their_answers(stem, count):
    cells = [c for c in _nb(stem)["cells"] if "BEGIN SOLUTION" in _text(c["source"])
             and "kernel-exercise" not in _tags(c)]
    assert len(cells) == count
    for cell in cells:
        assert cell["metadata"]["rmsnorm_lessons"]["answers"], _text(cell["source"])
