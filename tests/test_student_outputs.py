"""The student edition's outputs: nothing below a prediction shows what it asks for, the set-up
cell's machine goes, and a GPU's saved outputs stay under "saved on <card>, <date>: run the cell for
yours" (CPU)."""
from __future__ import annotations

import json

from rmsnorm_lessons.course import registry, student
from rmsnorm_lessons.course.notebook import RUN_KEY

LESSONS = [lesson.stem for lesson in registry.LESSONS]


def _nb(lesson):
    return json.loads((registry.notebook_dir() / f"{lesson}.ipynb").read_text())


def _src(cell):
    return "".join(cell["source"])


def _tags(cell):
    return cell.get("metadata", {}).get("tags", [])


def _code(source, tags=(), text="out\n"):
    return {"cell_type": "code", "metadata": {"tags": list(tags)}, "source": source,
            "execution_count": 3,
            "outputs": [{"output_type": "stream", "name": "stdout", "text": text}]}


H200_RUN = {RUN_KEY: {"device": "NVIDIA H200", "date": "2026-12-04"}}


def test_reveal_and_prediction_cells_and_what_answers_a_guess_lose_their_outputs():
    nb = {"cells": [_code("import rmsnorm_lessons as rl\nrl.notebook.setup()", [],
                          "GPU: NVIDIA H200 ...\n"),  # the set-up cell: the author's machine
                    _code("mine = rl.predict.guess('02.v1_ms', ms=0.8)", ["prediction"]),
                    _code("scale = 1e3", [], "1000.0\n"),  # feeds the comparison: cleared
                    _code("x = 2", [], "x\n"),  # read by nobody comparing: kept
                    _code("t = rl.bench.time('v1_naive')", ["gpu"], "0.4 ms\n"),
                    _code("rl.predict.versus(mine, ms=t.s * scale)"),
                    _code("rl.notebook.compare_with_ours(verdict, 'v1_naive')", ["reveal"],
                          "Ours: kernels/v1_naive.cu\n__global__ ...\n"),
                    _code("%%gpu\nrl.bench.table()", ["gpu"], "a table\n")],
          "metadata": H200_RUN, "nbformat": 4, "nbformat_minor": 5}
    assert student.answered_below(nb["cells"]) == {2, 4, 5}
    st = student.student_notebook(nb)
    assert [len(c["outputs"]) for c in st["cells"]] == [0, 0, 0, 1, 0, 0, 0, 2]
    assert st["cells"][0]["execution_count"] is None and st["cells"][3]["execution_count"] == 3
    label, table = st["cells"][7]["outputs"]  # a GPU's output below the answer: labelled
    assert label["data"]["text/plain"] == ("saved on NVIDIA H200, 2026-12-04: run the cell for "
                                           "yours")
    assert label["metadata"] == {"rmsnorm_lessons_saved_label": True} and table["text"]
    assert nb["cells"][1]["outputs"] and len(nb["cells"][7]["outputs"]) == 1, (
        "the instructor edition is not changed")
    del nb["metadata"][RUN_KEY]  # where the run is not recorded, nothing can say where: cleared
    assert student.student_notebook(nb)["cells"][7]["outputs"] == []




def test_a_guess_with_no_user_below_clears_the_next_cell():
    cells = [_code("mine = rl.predict.guess('x', ms=...)", ["prediction"]),
             _code("print(measure())"), _code("y = 1")]
    assert student.answered_below(cells) == {1}
    assert student.free_names("%%gpu\nfor v in vs:\n    t = f(v, N)\nprint(t)") == {
        "vs", "f", "N", "print"}


def test_a_saved_measurement_beside_a_guess_elsewhere_keeps_the_measurement_only(capsys):
    from rmsnorm_lessons.course import predict

    predict.guess("02.v1_ms", ms=0.8)
    gap = predict.versus("02.v1_ms", ms=0.4, why="atomics wait in L2")
    out = {"output_type": "display_data", "metadata": {},
           "data": {"text/plain": str(gap), predict.GAP_MIME: gap.data()}}
    nb = {"cells": [_code("import rmsnorm_lessons as rl"),  # no prediction cell above the gap
                    {"cell_type": "code", "metadata": {"tags": []}, "execution_count": 2,
                     "source": "rl.predict.versus('02.v1_ms', ms=t.ms)", "outputs": [out]}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    st = student.student_notebook(nb)
    [kept] = st["cells"][1]["outputs"]
    text, data = kept["data"]["text/plain"], kept["data"][predict.GAP_MIME]
    assert "0.8" not in text and "0.8" not in json.dumps(data) and "0.4" in text
    assert data["measured"] == {"ms": 0.4} and data["status"] == "NOT PREDICTED"
    assert text.startswith("02.v1_ms: what the course's GPU measured")
    assert "0.8" in json.dumps(nb), "the instructor edition is not changed"


def test_no_output_below_a_prediction_shows_its_measurement():
    """In every lesson's student edition, below each prediction down to the cell that compares
    with it, no output is left of a GPU cell or of the cells that compare or feed the comparison;
    and every GPU output left says which card and date made it."""
    for lesson in LESSONS:
        nb = _nb(lesson)
        st = student.student_notebook(nb)
        # by cell id: the student edition inserts cells (the heading over a folded explanation)
        by_id = {cell["id"]: cell for cell in st["cells"]}
        for j in student.answered_below(nb["cells"]):
            assert by_id[nb["cells"][j]["id"]]["outputs"] == [], (lesson, j)
        for cell in st["cells"]:
            if "gpu" in _tags(cell) and cell.get("outputs"):
                first = cell["outputs"][0]
                assert first.get("metadata", {}).get("rmsnorm_lessons_saved_label"), (
                    lesson, _src(cell))
                run = nb["metadata"][RUN_KEY]
                assert first["data"]["text/plain"].startswith(
                    f"saved on {run['device']}, {run['date']}: ")
