"""course/solutions.py on small made-up notebooks: the learner's kernel lines counted by issue 41's
rule, and a solution line spelled out above its exercise found (in a source or a saved output)."""
from __future__ import annotations

import pytest

from rmsnorm_lessons.course import solutions

EXERCISE = '''yours = r"""
#include "common.cuh"
extern "C" __global__ void k(float* y, const float* x, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;   // given
    // ### BEGIN SOLUTION
    // the learner's part: one comment line, not counted

    if (i < n) {
        y[i] = 2.0f * x[i];  /* a trailing comment: still code */
    }
    /* a block comment
       over two lines */
    __syncthreads();
    // ### END SOLUTION
#if 0 // ### BEGIN SKELETON
    // your code (about 4 lines)
#endif // ### END SKELETON
}
"""
lesson99.check_k(yours)'''


def code(source, tags=(), text=None):
    cell = {"cell_type": "code", "metadata": {"tags": list(tags)}, "source": source,
            "outputs": []}
    if text is not None:
        cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": text}]
    return cell


def markdown(source):
    return {"cell_type": "markdown", "metadata": {}, "source": source}


def test_code_lines_leave_out_blank_and_comment_only_lines():
    lines = ["", "  // a note", "x = 1;  // code", "/* one */", "/* a", " * block", " */ y();",
             "#pragma unroll", "  a /* in */ + b;"]
    assert solutions.code_lines(lines) == ["x = 1;  // code", " */ y();", "#pragma unroll",
                                           "  a /* in */ + b;"]


def test_the_learners_lines_are_counted_by_the_rule():
    assert solutions.kernel_lines(EXERCISE) == 4  # the if, its body, its brace, the barrier
    nb = {"cells": [markdown("# 99"), code(EXERCISE, ["kernel-exercise"]),
                    code("### BEGIN SOLUTION\nx = 1\n### END SOLUTION", ["prediction"]),
                    code(EXERCISE.replace("    }\n", "    }\n    y[0] = 0.0f;\n"),
                         ["kernel-exercise"])]}
    assert solutions.exercise_lines(nb) == [solutions.ExerciseLines(1, 4),
                                            solutions.ExerciseLines(3, 5)]
    with pytest.raises(ValueError, match="a notebook"):
        solutions.exercise_lines({"cells": "none"})


def test_a_solution_line_above_its_exercise_is_a_leak():
    clean = {"cells": [markdown("Write `y = 2 x` for the first n elements."),
                       code("print(rl.build.kernel_source('v1_naive'))", text="x = 1;\n"),
                       code(EXERCISE, ["kernel-exercise"])]}
    assert solutions.leaks(clean) == []
    spelled = {"cells": [markdown("Each thread does\n\n    if (i  <  n) {\n        y[i] =\n"
                                  "2.0f * x[i];"),
                         code("print(hint)", text="hint: __syncthreads();\n"),
                         code(EXERCISE, ["kernel-exercise"]),
                         code("print('after: if (i < n) {')")]}
    found = solutions.leaks(spelled)
    assert [(f.exercise, f.cell, f.where, f.line) for f in found] == [
        (2, 0, "source", "if (i < n) {"),
        (2, 0, "source", "y[i] = 2.0f * x[i];"),  # its comment is no part of the answer
        (2, 1, "output", "__syncthreads();")]  # a line below the exercise is none
    assert str(found[0]) == ("cell 0's source spells out a line of the exercise in cell 2: "
                             "if (i < n) {")


def test_short_lines_and_lines_the_exercise_gives_are_no_leak():
    given = EXERCISE.replace("// ### BEGIN SOLUTION", "    const int j = i;\n    // ### BEGIN "
                             "SOLUTION").replace("__syncthreads();", "__syncthreads();\n"
                                                 "    const int j = i;")
    answers = solutions.answer_lines(given)
    assert "const int j = i;" not in answers  # the cell gives it outside the region
    assert "}" not in answers and "__syncthreads();" in answers
    assert solutions.answer_lines(given, min_chars=17) == ["y[i] = 2.0f * x[i];"]
