"""Lessons 00-03 without a GPU: their pictures, exercises (right answers pass, wrong ones fail with
a useful message), compiling a source string, and the widgets. The GPU paths are marked ``gpu``."""
import json
import re
from pathlib import Path

import numpy as np
import pytest
from matplotlib.figure import Figure

from rmsnorm_lessons.core import build, gpu
from rmsnorm_lessons.course import plots, registry, student
from rmsnorm_lessons.inspection import access
from rmsnorm_lessons.lessons import lesson00, lesson01, lesson02, lesson03

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ["00_setup.ipynb", "01_rmsnorm_math.ipynb", "02_naive.ipynb", "03_warp_per_row.ipynb"]
needs_nvcc = pytest.mark.skipif(build.find_nvcc() is None, reason="nvcc not found")


# --- plots ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["thread_per_row", "warp_per_row", "v1_naive", "v2_warp"])
@pytest.mark.parametrize("rows,C,step,block",
                         [(32, 64, 3, 256), (16, 100, 3, 128), (5, 7, 99, 32), (64, 512, 0, 64)])
def test_access_pattern_returns_a_small_figure(layout, rows, C, step, block):
    fig = plots.access_pattern(layout, rows=rows, C=C, step=step, block_size=block)
    assert isinstance(fig, Figure)
    assert fig.dpi == plots.DPI and fig.get_size_inches()[0] <= plots.FIGSIZE[0]


def test_access_pattern_rejects_bad_arguments():
    with pytest.raises(ValueError, match="layout"):
        plots.access_pattern("row_per_block")
    with pytest.raises(ValueError, match="block_size"):
        plots.access_pattern(block_size=48)


def test_touched_elements_follow_the_kernels_indexing():
    v1 = access.touched_elements("thread_per_row", N=40, C=64, step=5)
    assert v1 == [(t, t, 5) for t in range(40)]
    v2 = access.touched_elements("warp_per_row", N=2, C=40, step=1)  # columns 32..39 only
    assert v2 == [(w * 32 + lane, w, 32 + lane) for w in range(2) for lane in range(8)]
    assert access.touched_elements("thread_per_row", N=4, C=8, step=8) == []


@pytest.mark.parametrize("layout,C,step,sectors", [
    ("thread_per_row", 1024, 0, 32), ("thread_per_row", 4, 0, 16), ("thread_per_row", 8, 3, 32),
    ("warp_per_row", 1024, 0, 4), ("warp_per_row", 1024, 7, 4), ("warp_per_row", 300, 9, 2),
    ("warp_per_row", 8, 0, 1),
])
def test_warp_sectors(layout, C, step, sectors):
    assert access.warp_sectors(layout, C, step) == sectors


def test_butterfly_values_sum_in_every_lane():
    x = np.arange(32.0)
    steps = access.butterfly_values(x)
    assert steps.shape == (6, 32)
    assert np.all(steps[-1] == x.sum())
    four = access.butterfly_values(x, offsets=(16, 8, 4, 2))[-1]
    assert four[0] == sum(range(0, 32, 2)) and four[1] == sum(range(1, 32, 2))


@pytest.mark.parametrize("offsets,highlight",
                         [((16, 8, 4, 2, 1), 0), ((16, 8, 4, 2), 5), ((1, 2, 4, 8, 16), None)])
def test_butterfly_figure(offsets, highlight):
    assert isinstance(lesson03.butterfly(offsets, highlight), Figure)


def test_other_lesson_figures():
    assert isinstance(lesson00.thread_indices(20, 8), Figure)
    assert isinstance(lesson00.thread_indices(16, 8), Figure)
    a = np.linspace(-1, 1, 11)
    assert isinstance(lesson01.gradient_check(a, a + 1e-9), Figure)
    results = [dict(name="v1_naive", N=8192, C=1024, ms=3.0),
               dict(name="v2_warp", N=8192, C=1024, ms=0.25),
               dict(name="v1_naive", N=16384, C=2048, ms=12.0),
               dict(name="v2_warp", N=16384, C=2048, ms=0.9)]
    assert isinstance(lesson03.speedup_bars(results), Figure)
    with pytest.raises(ValueError, match="baseline"):
        lesson03.speedup_bars(results, baseline="v9")


# --- exercises ------------------------------------------------------------------------------------


def test_lesson00_grid_and_bytes():
    assert lesson00.check_grid(1_000_003, 256, (1_000_003 + 255) // 256)
    assert lesson00.check_grid(1024, 256, 4)
    wrong = lesson00.check_grid(1_000_003, 256, 1_000_003 // 256)
    assert not wrong and "rounds down" in wrong.message
    assert not lesson00.check_grid(100, 8, 20)
    assert "replace the ..." in lesson00.check_grid(100, 8, ...).message
    assert lesson00.check_bytes(10, 80)
    assert "reads x and writes y" in lesson00.check_bytes(10, 40).message
    assert not lesson00.check_bytes(10, 120)


def _term2_right(dout, inp, weight, rstd):
    norm = inp * rstd[:, None]
    dnorm = weight * dout
    return -rstd[:, None] * norm * np.mean(dnorm * norm, axis=1, keepdims=True)


def test_lesson01_right_answer_passes():
    verdict = lesson01.check_term2(_term2_right)
    assert verdict.passed, verdict.message
    assert str(verdict).startswith("PASS")


@pytest.mark.parametrize("wrong,expect", [
    (lambda d, x, w, r: -_term2_right(d, x, w, r), "sign"),
    (lambda d, x, w, r: _term2_right(d, x, w, r) / r[:, None], "rstd in front is missing"),
    (lambda d, x, w, r: _term2_right(d, x, w, r) * x.shape[1], "sum"),
    (lambda d, x, w, r: -r[:, None] * (x * r[:, None])
     * np.mean(w * d * x * r[:, None], axis=0, keepdims=True), "axis=1"),
    (lambda d, x, w, r: -r[:, None] * (x * r[:, None]) * np.mean(w * d * x * r[:, None], axis=1),
     "keepdims"),
    (lambda d, x, w, r: np.mean(w * d * x * r[:, None], axis=1), "shape"),
    (lambda d, x, w, r: None, "returned None"),
    (lambda d, x, w, r: np.zeros_like(x), "expected"),
])
def test_lesson01_wrong_answers_fail_with_a_reason(wrong, expect):
    verdict = lesson01.check_term2(wrong)
    assert not verdict.passed
    assert expect in verdict.message, verdict.message


def test_lesson01_skeleton_fails():
    def term2(dout, inp, weight, rstd):
        raise NotImplementedError

    assert "NotImplementedError" in lesson01.check_term2(term2).message
    assert not lesson01.check_term2("not a function")


def test_lesson02_atomics():
    assert lesson02.check_atomics(8192, 1024, 8192 * 1024, 8192)
    assert lesson02.check_atomics(7, 13, 91.0, 7)
    wrong = lesson02.check_atomics(8192, 1024, 8192, 1024)
    assert not wrong and "one atomic per row" in wrong.message and "count rows" in wrong.message
    assert not lesson02.check_atomics(8192, 1024, 8192 * 1024, 8192 * 1024)
    assert "replace the ..." in lesson02.check_atomics(8192, 1024, ..., ...).message
    assert "whole number" in lesson02.check_atomics(8192, 1024, 1.5, 8192).message


def test_lesson02_sectors():
    assert lesson02.check_sectors(32, 4)
    wrong = lesson02.check_sectors(4, 32)
    assert not wrong and "a whole row apart" in wrong.message and "share sectors" in wrong.message
    assert not lesson02.check_sectors(32, 1)
    assert not lesson02.check_sectors(1, 4)


@needs_nvcc
def test_compile_source_reports_resources_and_errors():
    compiled = build.compile_source('extern "C" __global__ void k(float* x) { x[threadIdx.x] *= '
                                    '2.0f; }')
    assert compiled.kind == "cubin" and compiled.binary
    assert compiled.resources["k"].registers > 0
    ptx = build.compile_source('#include "common.cuh"\nextern "C" __global__ void k(float* x) '
                               '{ x[0] = warp_reduce_sum(x[threadIdx.x]); }', kind="ptx")
    assert b"shfl.sync.bfly" in ptx.binary
    with pytest.raises(build.CompileError, match="error"):
        build.compile_source("this is not CUDA;")
    with pytest.raises(ValueError):
        build.compile_source("", name="../x")


# --- widgets --------------------------------------------------------------------------------------


def test_access_explorer_builds_and_redraws_without_a_gpu():
    from rmsnorm_lessons.course import widgets

    e = widgets.access_explorer("thread_per_row", N=32, C=64, block_size=256)
    assert isinstance(e.figure(), Figure)
    assert "<b>32</b>" in e.note.value
    e.layout.value = "warp_per_row"
    assert e.step.max == 1 and "<b>4</b>" in e.note.value
    e.C.value = 300
    e.step.value = 9
    e.layout.value = "thread_per_row"
    assert e.step.max == 299
    assert isinstance(e.figure(), Figure)


def test_check_and_time_builds_without_a_gpu():
    from rmsnorm_lessons.core import gpu
    from rmsnorm_lessons.course import widgets

    c = widgets.check_and_time(["v1_naive", "v2_warp"], N=64, C=32)
    assert c.version.value == "v1_naive"
    assert widgets.check_and_time(["v1_naive", "v2_warp"],
                                  version="v2_warp").version.value == "v2_warp"
    with pytest.raises(ValueError):
        widgets.check_and_time(["v1_naive", "v7_imaginary"])
    if gpu.why_unavailable() is not None:
        text = c.run()
        assert text.startswith("Nothing was launched") and text.count("\n") == 0
        c._clicked()  # the button's handler: prints that sentence into the control's output area


@pytest.mark.gpu
def test_check_and_time_runs_on_the_gpu():
    from rmsnorm_lessons.course import widgets

    c = widgets.check_and_time(["v2_warp"], N=257, C=96, repeats=3)
    text = c.run()
    assert "OK" in text and "GB/s" in text, text
    assert len(c.results) == 1




# --- launch arithmetic for scale4 and an accumulating kernel (lesson 00's exercise) -------------


def test_lesson00_grid_with_several_elements_per_thread():
    n = 10_000_000
    assert lesson00.check_grid(n, 256, (n // 4 + 255) // 256, per_thread=4)
    per_float = lesson00.check_grid(n, 256, (n + 255) // 256, per_thread=4)
    assert not per_float and "each thread takes 4" in per_float.message
    rounded_down = lesson00.check_grid(n, 256, n // 4 // 256, per_thread=4)
    assert not rounded_down and "rounds down" in rounded_down.message
    with pytest.raises(ValueError, match="per_thread"):
        lesson00.check_grid(10, 256, 1, per_thread=4)


def test_lesson00_bytes_of_an_accumulating_kernel():
    assert lesson00.check_bytes(10, 120, accumulate=True)
    as_if_assigned = lesson00.check_bytes(10, 80, accumulate=True)
    assert not as_if_assigned and "reads y before it writes" in as_if_assigned.message
    assert not lesson00.check_bytes(10, 160, accumulate=True)
    assert not lesson00.check_bytes(10, 120)  # y[i] = a * x[i] does not read y


# --- the notebooks: the learner predicts and writes before any answer is on screen ----------------


def _nb(stem):
    return json.loads((ROOT / "notebooks" / f"{stem}.ipynb").read_text(encoding="utf-8"))


def _text(value):
    return "".join(value) if isinstance(value, list) else (value or "")


def _outputs(cell):
    return "\n".join(_text(o.get("text")) + _text(o.get("data", {}).get("text/plain"))
                     for o in cell.get("outputs", []))


def _tags(cell):
    return cell.get("metadata", {}).get("tags", [])


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


STEMS = [n.removesuffix(".ipynb") for n in NOTEBOOKS]


@pytest.mark.parametrize("stem", STEMS)
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


@pytest.mark.parametrize("stem", STEMS)
def test_prose_quotes_no_measured_figure(stem):
    """Prose speaks in ratios; measured figures (and this GPU's facts) are printed by cells."""
    for cell in _nb(stem)["cells"]:
        if cell["cell_type"] == "markdown":
            text = _text(cell["source"])
            found = re.findall(r"(?<!\w)\d[\d.,]*\s*(?:GB/s|TFLOP/s|ns\b|ms\b|us\b|SMs\b|%)",
                               text)
            assert not found, (found, text[:200])
            assert "2026-" not in text
