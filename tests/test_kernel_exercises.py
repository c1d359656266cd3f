"""The kernel exercises of lessons 02..09 and their harness
(rmsnorm_lessons/course/checking/kernel.py).

Here (no GPU): every solution compiles and says NOT VERIFIED, every skeleton says NOT YET, the
mistakes the SASS shows say NOT YET with their own message, and the diagnosis of a wrong result
names its kind (tried on made-up results, with the seed's bounds and with a bound per element). On
a GPU (marker ``gpu``): every solution PASSes (numbers in a child process, compute-sanitizer's race
check by default, timing), every skeleton and every mistake fails, each with its own message.
The helpers of kernels/common.cuh that v3 and v4 share are the ones lessons 04 and 06 name.
"""
from __future__ import annotations

import ast
import json
from pathlib import Path

import numpy as np
import pytest
from _lesson_support import LESSONS_04_05
from _lesson_support import nb_cells as _cells

from rmsnorm_lessons.core import build, gpu, ladder, reference
from rmsnorm_lessons.course import student
from rmsnorm_lessons.course.checking import kernel as kernel_check
from rmsnorm_lessons.course.verdict import Verdict
from rmsnorm_lessons.lessons import (lesson02, lesson03, lesson04, lesson05, lesson06, lesson07,
                                     lesson08, lesson09, lesson10, lesson13)

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
needs_nvcc = pytest.mark.skipif(build.find_nvcc() is None, reason="nvcc not found")
needs_sass = pytest.mark.skipif(build.find_tool("nvdisasm") is None
                                and build.find_tool("cuobjdump") is None,
                                reason="no SASS tools (cuobjdump/nvdisasm)")
no_gpu_here = pytest.mark.skipif(gpu.available(),
                                 reason="checks what is said where there is no GPU")

CHECKS = {"02_naive": lesson02.check_v1_kernel, "03_warp_per_row": lesson03.check_v2_kernel,
          "04_shared_memory": lesson04.check_v3_kernel, "05_bf16": lesson05.check_v4_draft,
          "06_vectorized": lesson06.check_v4_kernel,
          "07_two_pass": lesson07.check_v5_kernel, "08_last_block": lesson08.check_v6_kernel,
          "09_bytes_in_flight": lesson09.check_scale_kernel,
          "10_v7_one_pass": lesson10.check_v7_kernel,
          "13_finding_bugs": lesson13.check_seed_loop}

#: (lesson, mistake, text of the solution, replaced by, words its message holds, caught without
#: running)
MISTAKES = [
    ("02_naive", "= for +=", "dinp_row[c] += r * (dnorm", "dinp_row[c] = r * (dnorm",
     ("dinp", "+="), False),
    ("02_naive", "no atomic", "atomicAdd(&dweight[c], norm * dout_row[c]);",
     "dweight[c] += norm * dout_row[c];",
     ("atomicAdd",), True),
    ("03_warp_per_row", "the wrong shuffle", "__shfl_xor_sync(0xffffffff, partial, offset)",
     "__shfl_down_sync(0xffffffff, partial, offset)", ("__shfl_down_sync", "lane 0"), True),
    ("03_warp_per_row", "four steps", "int offset = 16; offset > 0;",
     "int offset = 16; offset > 1;",
     ("5 __shfl_xor_sync steps", "4 SHFL.BFLY"), True),
    ("04_shared_memory", "missing __syncthreads",
     "    __syncthreads();\n    for (int c = threadIdx.x; c < C; c += blockDim.x) atomicAdd(",
     "    for (int c = threadIdx.x; c < C; c += blockDim.x) atomicAdd(", ("__syncthreads", "1 BAR"),
     True),
    ("04_shared_memory", "no shared atomic", "atomicAdd(&dweight_shared[c], norm * dout_row[c]);",
     "dweight_shared[c] += norm * dout_row[c];", ("dweight_shared", "0 ATOMS"), True),
    ("06_vectorized", "stores one by one", "            store128cg(dinp_row + c, d);\n",
     "            for (int k = 0; k < x128::size; k++) dinp_row[c + k] = d[k];\n",
     ("128-bit store",), True),
    ("06_vectorized", "= for +=", "d[k] = __float2bfloat16((float)d[k] + r * (dnorm",
     "d[k] = __float2bfloat16(r * (dnorm", ("dinp", "+="), False),
    ("06_vectorized", "the interleaved slot",
     "    return (c % x128::size) * (C / x128::size) + c / x128::size;\n    // ### END SOLUTION",
     "    return c;\n    // ### END SOLUTION", ("staged() returns c", "8-way conflict"), True),
    ("06_vectorized", "32 chunks a plane, not C / 8",
     "(c % x128::size) * (C / x128::size) + c / x128::size;",
     "(c % x128::size) * WARP_SIZE + c / x128::size;",
     ("staged() at C = 8", "a slot of its own"), False),
    ("07_two_pass", "off-by-one: the last block", "for (int b = 0; b < blocks; b++) sum +=",
     "for (int b = 0; b < blocks - 1; b++) sum +=",
     ("reduce_dweight_v5 leaves out the partials of block 4, the last", "missing"), False),
    ("07_two_pass", "= for +=", "dweight[c] = __float2bfloat16((float)dweight[c] + sum);",
     "dweight[c] = __float2bfloat16(sum);", ("dweight", "+="), False),
    ("07_two_pass", "an atomic",
     "for (int b = 0; b < blocks; b++) sum += partials[(size_t)b * C + c];",
     "for (int b = 0; b < blocks; b++) sum += partials[(size_t)b * C + c];\n"
     "    atomicAdd((float*)partials + c, 0.0f);", ("atomic", "block order"), True),
    ("08_last_block", "no fence", "    __threadfence();\n    __syncthreads();\n",
     "    __syncthreads();\n", ("no fence", "MEMBAR"), True),
    ("08_last_block", "no acquire fence", "        if (ticket == gridDim.x - 1) __threadfence();\n",
     "",
     ("acquire", "1 MEMBAR"), True),
    ("08_last_block", "the seed's limit", "atomicInc(ticket_counter, gridDim.x - 1)",
     "atomicInc(ticket_counter, gridDim.x)", ("seed's limit", "[4, 0, 1, 2]"), True),
    # lesson 09: y = a * x with 128-bit loads, all of a thread's issued before the first store
    ("09_bytes_in_flight", "a store after each load",
     "        if (i < n4) v[k] = x[i];\n    }\n    #pragma unroll\n    for (int k = 0; k < UNROLL; "
     "k++) {  // ... before the first is used\n        const int i = base + k * blockDim.x;\n",
     "        if (i < n4) v[k] = x[i];\n",
     ("only 1 LDG.E.128 before the first store",), True),
    ("09_bytes_in_flight", "four 4-byte loads", "if (i < n4) v[k] = x[i];",
     "if (i < n4) { const float* f = (const float*)x; v[k] = make_float4(f[4 * i], f[4 * i + 1], "
     "f[4 * i + 2], f[4 * i + 3]); }", ("no 128-bit loads", "0 LDG.128"), True),
    ("09_bytes_in_flight", "no guard on the store", "if (i < n4) y[i] = make_float4(",
     "y[i] = make_float4(",
     ("wrote past the end", "if (i < n4)"), False),
    ("09_bytes_in_flight", "a thread's chunks side by side",
     "const int i = base + k * blockDim.x;\n        if (i < n4) y",
     "const int i = base + k;\n        if (i < n4) y", ("never written", "base + k * blockDim.x"),
     False),
    # lesson 10: the learner's load_row and row_pass, spliced into v7_fast.cu (a chunk past the
    # row's end loaded keeps the numbers right, w[j] being 0 there: the CPU twin finds the read
    # past dout's end, after a GPU's PASS too)
    ("10_v7_one_pass", "a barrier in the row pass",
     "            sum[k] += inp_k * r * dout_k;\n        }\n",
     "            sum[k] += inp_k * r * dout_k;\n        }\n        __syncthreads();\n",
     ("__syncthreads", "BAR", "v7_fast's"), True),
    ("10_v7_one_pass", "the lanes summed in the row pass", "    return dot;\n}",
     "    return warp_reduce_sum(dot);\n}", ("exchange()", "SHFL", "32 times"), True),
    ("10_v7_one_pass", "= for +=", "sum[k] += inp_k * r * dout_k;",
     "sum[k] = inp_k * r * dout_k;",
     ("dweight", "each row adds into what a and b already hold", "right at 129x1600"), False),
    ("10_v7_one_pass", "no weight in the dot product", "dot += widen(wj, k) * dout_k * inp_k;",
     "dot += dout_k * inp_k;", ("dinp", "weight * dout * inp"), False),
    ("10_v7_one_pass", "the sums never updated",
     "        a = make_float4(sum[0], sum[1], sum[2], sum[3]);\n"
     "        b = make_float4(sum[4], sum[5], sum[6], sum[7]);\n", "",
     ("dweight", "starting values", "leaves the sums as it read them"), False),
    ("10_v7_one_pass", "weight not loaded where it is not in registers",
     "        if (!WEIGHT_IN_REGISTERS && chunk < p.chunks) wj = __ldg(weight4 + chunk);\n", "",
     ("WEIGHT_IN_REGISTERS", "weight4"), True),
    ("10_v7_one_pass", "plain loads of dout and inp",
     "            g[j] = __ldcs(dout_row + chunk);\n            x[j] = __ldcs(inp_row + chunk);\n",
     "            g[j] = dout_row[chunk];\n            x[j] = inp_row[chunk];\n",
     ("read once", "__ldcs", "LDG.EF.128"), True),
    ("10_v7_one_pass", "a chunk past the row's end loaded",
     "        if (chunk < p.chunks) {\n            g[j] = __ldcs",
     "        if (chunk <= p.chunks) {\n            g[j] = __ldcs",
     ("on the CPU twin", "out of bounds", "load_row", "dout["), False),
    ("10_v7_one_pass", "the chunks of a thread side by side",
     "        if (chunk < p.chunks) {\n            g[j] = __ldcs(dout_row + chunk);\n"
     "            x[j] = __ldcs(inp_row + chunk);\n",
     "        if (p.t * K + j < p.chunks) {\n            g[j] = __ldcs(dout_row + p.t * K + j);\n"
     "            x[j] = __ldcs(inp_row + p.t * K + j);\n", ("dinp", "p.chunk(j)"), False),
    # lesson 13: the seed's row loop made uniform, and three ways to get it wrong
    ("13_finding_bugs", "the seed's loop left in",
     "    for (long long first = (long long)blockIdx.x * warps; first < N;\n"
     "         first += (long long)gridDim.x * warps) {\n"
     "        const long long row = first + warp;\n        const bool active = row < N;",
     "    for (long long row = (long long)blockIdx.x * warps + warp; row < N;\n"
     "         row += (long long)gridDim.x * warps) {\n        const bool active = true;",
     ("a __syncthreads inside the loop with some warps gone", "as often as the others"),
     False),
    ("13_finding_bugs", "a barrier removed with the loop",
     "                if (warp != 0) store128(staging + threadIdx.x * f128::size, contrib);\n"
     "                __syncthreads();\n",
     "                if (warp != 0) store128(staging + threadIdx.x * f128::size, contrib);\n",
     ("__syncthreads", "BAR"), True),
    ("13_finding_bugs", "a warp past N loads its row",
     "            if (active && c < C) {", "            if (c < C) {",
     ("on the CPU twin", "out of bounds", "dout["), False),
    ("13_finding_bugs", "a warp past N stores dinp",
     "            if (active && c < C) store128cg(", "            if (c < C) store128cg(",
     ("dinp",), False),
]


@pytest.fixture(autouse=True, scope="module")
def _forget_learners_rungs():
    """The checks register yours_v1..yours_v6; later test modules see the shipped ladder only."""
    yield
    for name in [v for v in ladder.VERSIONS if v.startswith("yours_")]:
        ladder.unregister(name)


def kernel_text(lesson: str) -> str:
    """The instructor's CUDA text of the lesson's kernel-exercise cell (``yours_vN =
    r'''...'''``)."""
    nb = json.loads((NOTEBOOKS / f"{lesson}.ipynb").read_text())
    cells = [c for c in nb["cells"] if "kernel-exercise" in c.get("metadata", {}).get("tags", [])]
    assert len(cells) == 1, f"{lesson}: one cell tagged kernel-exercise"
    tree = ast.parse("".join(cells[0]["source"]))
    assert isinstance(tree.body[0], ast.Assign), "the cell assigns the CUDA text to a name"
    return tree.body[0].value.value


def mistaken(lesson, old, new) -> str:
    text = kernel_text(lesson)
    assert text.count(old) == 1, f"{lesson}: the mistake's text is not in the solution once"
    return text.replace(old, new)


# --- the cells and the markers
# ----------------------------------------------------------------------


@pytest.mark.parametrize("lesson", CHECKS)
def test_exercise_cell_is_a_skeleton_plus_a_solution(lesson):
    text = kernel_text(lesson)
    assert student.has_solution(text)
    skeleton = student.strip_solutions(text)
    assert "SOLUTION" not in skeleton and "SKELETON" not in skeleton
    assert kernel_check.todo_lines(skeleton), "the skeleton marks what to write with // TODO"
    assert not kernel_check.todo_lines(text), ("the instructor's text has no TODO outside its "
                                               "skeleton blocks")
    # a check cell calls the lesson's check on the cell's name
    nb = json.loads((NOTEBOOKS / f"{lesson}.ipynb").read_text())
    sources = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    assert any(f"{CHECKS[lesson].__name__}(" in s for s in sources)


def test_todo_lines_skip_the_skeleton_blocks():
    text = ("int a;\n#if 0 // ### BEGIN SKELETON\n    // TODO: hidden\n#endif // ### END SKELETON\n"
            "    // TODO: shown\n#if 0 // ### BEGIN SKELETON\n// TODO: hidden too\n#endif // ### "
            "END SKELETON\n")
    assert kernel_check.todo_lines(text) == [5]


def test_verdict_has_three_states():
    assert str(Verdict(True, "x")) == "PASS: x"
    assert str(Verdict(False, "x")) == "NOT YET: x"
    v = Verdict(False, "x", verified=False)
    assert str(v) == "NOT VERIFIED: x" and v.status == "NOT VERIFIED" and not v
    with pytest.raises(ValueError):
        Verdict(True, "x", verified=False)


# --- without running: compile, inspect, static checks
# ------------------------------------------------


@needs_nvcc
@pytest.mark.parametrize("lesson", CHECKS)
def test_skeleton_compiles_and_says_not_yet(lesson):
    verdict = CHECKS[lesson](student.strip_solutions(kernel_text(lesson)))
    assert verdict.status == "NOT YET", verdict.message
    assert "nvcc compiled" in verdict.message, "the skeleton compiles"
    assert "TODO" in verdict.message


@needs_nvcc
@needs_sass
@pytest.mark.parametrize("lesson,name,old,new,words", [m[:5] for m in MISTAKES if m[5]],
                         ids=[f"{m[0]}: {m[1]}" for m in MISTAKES if m[5]])
def test_mistakes_the_sass_shows_say_not_yet_everywhere(lesson, name, old, new, words):
    verdict = CHECKS[lesson](mistaken(lesson, old, new))
    assert verdict.status == "NOT YET", verdict.message
    for w in words:
        assert w in verdict.message, (w, verdict.message)


@needs_nvcc
def test_compile_errors_point_at_the_line_of_the_cell():
    text = kernel_text("04_shared_memory")
    lines = text.split("\n")
    at = next(i for i, ln in enumerate(lines) if "float dnorm = weight[c]" in ln)
    lines[at] = lines[at].replace("weight[c]", "weights[c]")  # an undefined name
    verdict = lesson04.check_v3_kernel("\n".join(lines))
    assert verdict.status == "NOT YET", verdict.message
    # line k of the text is line k of the cell `yours_v3 = r'''<newline>...`: the text starts with
    # that newline
    assert f"line {at + 1}: identifier \"weights\" is undefined" in verdict.message, verdict.message
    assert "nvcc does not accept it" in verdict.message


@needs_nvcc
def test_a_missing_kernel_is_named():
    text = kernel_text("02_naive").replace("rmsnorm_backward_v1(", "my_kernel(")
    verdict = lesson02.check_v1_kernel(text)
    assert verdict.status == "NOT YET" and "rmsnorm_backward_v1" in verdict.message, verdict.message


# --- diagnosing wrong results (made-up results: no GPU needed)
# ---------------------------------------


def _problem(N=129, C=200, seed=3):
    p = reference.random_problem(N, C, np.float32, seed=seed)
    ref = reference.backward(p["dout"], p["inp"], p["weight"], p["rstd"], p["dinp"], p["dweight"])
    delta = reference.backward(p["dout"], p["inp"], p["weight"], p["rstd"])
    return p, ref, delta


def _describe(name, got, p, ref, delta, **kw):
    i = 0 if name == "dinp" else 1
    return kernel_check.describe_output(name, got, ref[i], p[name], delta[i], 1e-3, 1.2e-7,
                                        problem=p, **kw)


def test_diagnosis_overwritten_unchanged_factor():
    p, ref, delta = _problem()
    kind, text = _describe("dinp", delta[0], p, ref, delta)
    assert kind == "overwritten" and "+=" in text
    kind, text = _describe("dinp", p["dinp"], p, ref, delta)
    assert kind == "unchanged" and "starting values" in text
    kind, text = _describe("dinp", p["dinp"] + 32 * delta[0], p, ref, delta)
    assert kind == "factor" and "32" in text


def test_diagnosis_names_rows_and_columns():
    p, ref, delta = _problem()
    got = ref[0].copy()
    got[-1] = p["dinp"][-1]  # the last row never done
    kind, text = _describe("dinp", got, p, ref, delta)
    assert "only the last row (128)" in text, text
    got = ref[0].copy()
    got[:, 192:] = 0  # the last 8 columns
    kind, text = _describe("dinp", got, p, ref, delta)
    assert "the last 8 columns" in text, text


def test_diagnosis_names_missing_blocks():
    p, ref, delta = _problem(N=129, C=200)
    rows_per_block, grid = 16, 9
    owner = (np.arange(129) // rows_per_block) % grid
    contrib = p["inp"].astype(np.float64) * p["rstd"][:, None] * p["dout"]
    got = p["dweight"] + contrib[owner != 3].sum(axis=0)  # block 3's partials missing
    kind, text = _describe("dweight", got, p, ref, delta, grid=grid, rows_per_block=rows_per_block)
    assert kind == "blocks" and "missing" in text and "blocks 3" in text, text
    got = contrib.sum(axis=0)  # dweight = instead of +=
    kind, text = _describe("dweight", got, p, ref, delta, grid=grid, rows_per_block=rows_per_block)
    assert "+=" in text, text


# --- on the GPU
# ---------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("lesson", CHECKS)
def test_solution_passes_on_the_gpu(lesson):
    verdict = CHECKS[lesson](kernel_text(lesson))
    assert verdict.status == "PASS", verdict.message
    assert "yours" in verdict.message and "ms" in verdict.message  # timed beside the shipped rung


@pytest.mark.gpu
@pytest.mark.parametrize("lesson", CHECKS)
def test_skeleton_fails_on_the_gpu(lesson):
    verdict = CHECKS[lesson](student.strip_solutions(kernel_text(lesson)))
    assert verdict.status == "NOT YET", verdict.message


@pytest.mark.gpu
@pytest.mark.parametrize("lesson,name,old,new,words", [m[:5] for m in MISTAKES],
                         ids=[f"{m[0]}: {m[1]}" for m in MISTAKES])
def test_mistakes_fail_on_the_gpu_with_their_own_message(lesson, name, old, new, words):
    verdict = CHECKS[lesson](mistaken(lesson, old, new))
    assert verdict.status == "NOT YET", verdict.message
    for w in words:
        assert w in verdict.message, (w, verdict.message)


def test_race_check_says_so_where_compute_sanitizer_is_missing(monkeypatch):
    monkeypatch.setattr(build, "find_tool", lambda tool: None)
    rung = kernel_check.register("x", name="yours_sanitize", kernels=("k",),
                                 plan=ladder.v1_naive.plan,
                                 dtype=ladder.FP32)
    assert kernel_check.sanitize(rung) == ("compute-sanitizer is not installed here, so no race "
                                           "check was run")


def test_diagnosis_takes_a_bound_per_element():
    """The learner-kernel checks diagnose with compare.strict_bounds' bound, an array."""
    from rmsnorm_lessons.core import compare

    p, ref, delta = _problem()
    want, allowed, _ = compare.strict_bounds(p, np.float32)["dinp"]
    got = want.copy()
    got[:, -1] = p["dinp"][:, -1]  # the last column never added to
    kind, text = kernel_check.describe_output("dinp", got, want, p["dinp"], delta[0], allowed, 0.0)
    assert "only the last column (199)" in text, text
    kind, text = kernel_check.describe_output("dinp", p["dinp"], want, p["dinp"], delta[0], allowed,
                                              0.0)
    assert kind == "unchanged", text


@needs_nvcc
@needs_sass
def test_an_order_check_says_nothing_of_an_instruction_that_is_not_there_yet():
    """Lesson 08's skeleton has no ticket yet: the check of the barrier between the fence and the
    ticket must not tell the learner to add the barrier the skeleton already has."""
    verdict = CHECKS["08_last_block"](student.strip_solutions(kernel_text("08_last_block")))
    assert verdict.status == "NOT YET"
    assert "no __syncthreads() between the fence and the ticket" not in verdict.message
    assert "not checked, there is no ATOMG/ATOM in the SASS" in verdict.message, verdict.message


# --- v3 and v4 walk their rows with the helpers lessons 04 and 06 name ----------------------------


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
        assert "warps_per_block + threadIdx.x" not in kernel_text(name)
