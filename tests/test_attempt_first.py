"""Nothing is given away before the attempt (issue 27), as the notebooks of lessons 00-08 are laid
out (CPU): a prediction comes before the measurement it is compared with, the learner's kernel is
checked before ours is revealed, and nothing above the exercise prints ours. The same rules over
every lesson's student edition: tests/test_student_answers.py."""
import re

import pytest
from _lesson_support import LESSONS_04_05, ROOT
from _lesson_support import nb_cells as _cells
from _lesson_support import notebook as _nb
from _lesson_support import source_text as _text
from _lesson_support import tags as _tags

from rmsnorm_lessons.course import registry

# --- lessons 00-03 --------------------------------------------------------------------------------


@pytest.mark.parametrize("stem", ["02_naive", "03_warp_per_row"])
def test_the_rung_is_revealed_only_after_the_learners_check(stem):
    lesson = registry.by_stem(stem)
    cells = _nb(stem)["cells"]
    kernel = next(i for i, c in enumerate(cells) if "kernel-exercise" in _tags(c))
    for cell in cells[:kernel]:
        src = _text(cell["source"])
        assert "kernel_source(" not in src and "getsource(" not in src, src
    check = cells[kernel + 1]
    assert "exercise-check" in _tags(check)
    assert _text(check["source"]).splitlines()[-1] == "verdict"
    assert "sanitize" not in _text(check["source"])
    reveal = next(c for c in cells[kernel + 2:] if c["cell_type"] == "code")
    assert "reveal" in _tags(reveal)
    assert f'compare_with_ours(verdict, "{lesson.rung}")' in _text(reveal["source"])


@pytest.mark.parametrize("stem,key", [("00_setup", "00.scale_pct"),
                                      ("00_setup", "00.scale4_speedup"),
                                      ("02_naive", "02.v1_ms"),
                                      ("03_warp_per_row", "03.v2_speedup")])
def test_a_prediction_comes_before_its_measurement(stem, key):
    cells = _nb(stem)["cells"]
    sources = [_text(c["source"]) for c in cells]
    (guess,) = [i for i, s in enumerate(sources) if f'rl.predict.guess("{key}"' in s]
    assert "prediction" in _tags(cells[guess]) and "..." in sources[guess]  # no pre-filled guess
    assert cells[guess - 1]["cell_type"] == "markdown"  # what to predict, from what
    name = sources[guess].split("=")[0].strip()
    (measured,) = [i for i, s in enumerate(sources) if f"rl.predict.versus({name}," in s]
    assert measured > guess
    timed = re.compile(r"\bbench\.|gpu\.Timer\(|check_v\d_kernel")
    timings = [i for i, s in enumerate(sources)
               if cells[i]["cell_type"] == "code" and timed.search(s)]
    # lesson 00 times scale, then scale4, each after its own prediction; 02, 03 time after theirs
    nth = {"00.scale4_speedup": 1}.get(key, 0)
    assert timings[nth] > guess, (timings, guess)


# --- lessons 04 and 06: predict, write, then see ours ---------------------------------------------


#: what a cell above the kernel exercise must not print: the rung's kernel, and v4's rung module
#: (it mirrors staged(), part of the answer; v3's module holds only the plan)
ANSWERS_SHOWN_BY = {"04_shared_memory": ['kernel_source("v3_smem")'],
                    "06_vectorized": ['kernel_source("v4_vec_bf16")',
                                           "getsource(rl.ladder.v4_vec_bf16)"]}


@pytest.mark.parametrize("name", LESSONS_04_05)
def test_lessons_04_05_predict_write_then_see_ours(name):
    from rmsnorm_lessons.course import registry

    rung = registry.by_stem(name).rung
    cells = _cells(f"{name}.ipynb")
    at = next(i for i, c in enumerate(cells) if "kernel-exercise" in _tags(c))
    for cell in cells[:at]:
        if cell.cell_type == "code":
            for shows in ANSWERS_SHOWN_BY[name]:
                assert shows not in cell.source, f"{name} shows {shows} above its exercise"
    check, reveal = cells[at + 1], cells[at + 3]
    assert "exercise-check" in _tags(check) and check.source.splitlines()[-1] == "verdict"
    assert "reveal" in _tags(reveal)
    assert f'compare_with_ours(verdict, "{rung}")' in reveal.source
    guesses = [(i, c) for i, c in enumerate(cells) if "prediction" in _tags(c)]
    assert guesses and guesses[0][0] < at, "a prediction before the exercise's timed check"
    for i, cell in guesses:
        name_ = cell.source.split("=")[0].strip()
        assert f'rl.predict.guess("{name[:2]}.' in cell.source and "..." in cell.source
        assert cells[i - 1].cell_type == "markdown", "a line saying what to predict, and from what"
        measured = [c for c in cells[i + 1:] if f"rl.predict.versus({name_}," in c.source]
        # on the GPU, or on the CPU (lesson 06's tolerance, in its Explore tail)
        assert measured, f"{name_} is compared with a measurement"


# --- lessons 07 and 08: the learner writes before ours shows, and predicts before measuring -------


def _sources(name):
    """(cell type, tags, source and saved outputs) of each cell of a notebook, read as JSON."""
    import json

    def shown(cell):
        return "".join("".join(o.get("text") or o.get("data", {}).get("text/plain") or "")
                       for o in cell.get("outputs", []))

    nb = json.loads((ROOT / "notebooks" / name).read_text())
    return [(c["cell_type"], c["metadata"].get("tags", []), "".join(c["source"]) + shown(c))
            for c in nb["cells"]]


def _tagged(cells, tag):
    return [i for i, (_, tags, _) in enumerate(cells) if tag in tags]


@pytest.mark.parametrize("name, rung, parts", [
    ("07_two_pass.ipynb", "v5_two_pass", ("rmsnorm_backward_v5", "reduce_dweight_v5")),
    ("08_last_block.ipynb", "v6_last_block", ("rmsnorm_backward_v6",))])
def test_ours_shows_only_after_the_learners_check(name, rung, parts):
    from rmsnorm_lessons.core import build
    from rmsnorm_lessons.course import notebook

    cells = _sources(name)
    [exercise], [check], reveals = (_tagged(cells, t) for t in
                                    ("kernel-exercise", "exercise-check", "reveal"))
    assert reveals and exercise < check < min(reveals)
    import json

    check_source = "".join(json.loads((ROOT / "notebooks" / name).read_text())
                           ["cells"][check]["source"])
    assert check_source.rstrip().endswith("\nverdict"), "the check cell shows its verdict"
    ours = build.kernel_source(rung)
    for _, _, text in cells[:exercise]:  # nothing above the exercise prints ours
        assert f'kernel_source("{rung}")' not in text, text
        for part in parts:
            assert notebook.part_of(ours, part) not in text
    shown = "".join(cells[i][2] for i in reveals)
    for part in parts:
        assert f'part="{part}"' in shown
        assert notebook.part_of(ours, part)  # the part exists in ours


@pytest.mark.parametrize("name, keys", [
    ("07_two_pass.ipynb", ("07.scratch_traffic", "07.v5_vs_v4")),
    ("08_last_block.ipynb", ("08.v6_vs_v5",))])
def test_lessons_06_07_predict_before_they_measure(name, keys):
    cells = _sources(name)
    for key in keys:
        [guess] = [i for i, (_, tags, text) in enumerate(cells)
                   if "prediction" in tags and f'guess("{key}"' in text]
        assert "..." in cells[guess][2], "the saved notebook leaves the guess to the learner"
        var = cells[guess][2].split("=")[0].strip()  # mine_x = rl.predict.guess(...)
        [measured] = [i for i, (_, _, text) in enumerate(cells) if f"versus({var}," in text]
        assert guess < measured
