"""Lessons 04 and 06 give nothing away before the attempt (issue 27): the learner predicts, writes,
is checked and only then sees ours; lesson 04's kernel starts from v3's signature and ends as v3
as shipped; v3 and v4 share the helpers of kernels/common.cuh that lesson 04 names. Read without
running anything (CPU)."""
import ast
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent


def _cells(name):
    nb = nbformat.read(ROOT / "notebooks" / name, as_version=4)
    nbformat.validate(nb)
    return nb.cells


LESSONS_04_05 = ["04_shared_memory", "06_vectorized"]
#: what a cell above the kernel exercise must not print: the rung's kernel, and v4's rung module
#: (it mirrors staged(), part of the answer; v3's module holds only the plan)
ANSWERS_SHOWN_BY = {"04_shared_memory": ['kernel_source("v3_smem")'],
                    "06_vectorized": ['kernel_source("v4_vec_bf16")',
                                           "getsource(rl.ladder.v4_vec_bf16)"]}


def _tags(cell):
    return cell.metadata.get("tags", [])


def _exercise_text(name):
    [cell] = [c for c in _cells(f"{name}.ipynb") if "kernel-exercise" in _tags(c)]
    return ast.parse(cell.source).body[0].value.value


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


def test_lesson04_exercise_starts_from_the_signature_and_ends_as_v3():
    from rmsnorm_lessons.core import build
    from rmsnorm_lessons.course import student

    text = _exercise_text("04_shared_memory")
    skeleton = student.strip_solutions(text)
    body = skeleton[skeleton.index("{") + 1:skeleton.rindex("}")]
    assert all(line.strip().startswith("// TODO") for line in body.splitlines() if line.strip())
    assert 'extern "C" __global__ void rmsnorm_backward_v3(' in skeleton
    begin = "// ### BEGIN SOLUTION\n"
    solution = text[text.index(begin) + len(begin):text.index("    // ### END SOLUTION")]
    shipped = build.kernel_source("v3_smem")
    shipped_body = shipped[shipped.index("{") + 2:shipped.rindex("}")]
    strip = lambda s: [ln.split("//")[0].rstrip() for ln in s.splitlines()]  # noqa: E731
    assert strip(solution) == strip(shipped_body), "the solution is v3 as shipped (ours, revealed)"


def test_v3_and_v4_walk_their_rows_with_the_helpers_the_lessons_name():
    from rmsnorm_lessons.core import build

    common = build.kernel_source("common.cuh")
    helpers = ("zero_block_shared", "first_row_of_warp", "warps_in_grid")
    for helper in helpers:
        assert f" {helper}(" in common
        for rung in ("v3_smem", "v4_vec_bf16"):
            assert f"{helper}(" in build.kernel_source(rung), (rung, helper)
    prose = "".join(c.source for c in _cells("04_shared_memory.ipynb") if c.cell_type == "markdown")
    assert all(f"`{h}" in prose for h in helpers)
    for name in LESSONS_04_05:
        assert "warps_per_block + threadIdx.x" not in _exercise_text(name)


def test_lesson04_points_at_v2_without_printing_it():
    # v3's solution repeats v2's arithmetic line for line: v2 printed or quoted in the lesson would
    # read as v3's solution shown before the attempt; the lesson names the file instead
    cells = _cells("04_shared_memory.ipynb")
    at = next(i for i, c in enumerate(cells) if "kernel-exercise" in _tags(c))
    above = "".join(c.source for c in cells[:at])
    assert "`kernels/v2_warp.cu`" in above and (ROOT / "kernels" / "v2_warp.cu").is_file()
    assert 'kernel_source("v2_warp")' not in above and "```cuda" not in above
