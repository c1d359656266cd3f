"""Lesson 10 (v7: one pass over each row): the opening's diagnosis, the row plan's decision, the
kernel exercise's splice of load_row and row_pass into kernels/v7_fast.cu, its static checks and
where nvcc's errors point, and its timing against v7's register path (CPU; the GPU runs are in
tests/test_kernel_exercises.py with the other exercises)."""
from __future__ import annotations

import pytest
from test_kernel_exercises import kernel_text, needs_nvcc

from rmsnorm_lessons.core import build, ladder
from rmsnorm_lessons.course import student
from rmsnorm_lessons.course.checking import kernel as kernel_check
from rmsnorm_lessons.lessons import lesson10


@needs_nvcc
def test_lesson10_errors_point_at_the_cell_or_at_v7_fast():
    text = kernel_text("10_v7_one_pass")
    lines = text.split("\n")
    at = next(i for i, ln in enumerate(lines) if "dot += widen(wj, k)" in ln)
    lines[at] = lines[at].replace("widen(wj, k)", "widen(wk, k)")  # an undefined name
    verdict = lesson10.check_v7_kernel("\n".join(lines))
    assert verdict.status == "NOT YET" and f"line {at + 1}: " in verdict.message, verdict.message
    # the learner's row_pass with another signature: v7's own call to it fails, at v7_fast.cu's line
    verdict = lesson10.check_v7_kernel(text.replace(
        "bool WEIGHT_IN_REGISTERS>\n__device__ __forceinline__ float row_pass(",
        "bool WEIGHT_IN_REGISTERS, int UNUSED>\n__device__ __forceinline__ float row_pass("))
    assert verdict.status == "NOT YET" and "v7_fast.cu(" in verdict.message, verdict.message
    verdict = lesson10.check_v7_kernel(text.replace("load_row", "fetch_row"))
    assert verdict.status == "NOT YET", verdict.message
    assert "keep the functions load_row and row_pass" in verdict.message, verdict.message
    assert "no load_row" in verdict.message, verdict.message


def test_lesson10_solution_is_v7s_own_two_steps():
    """The instructor's load_row and row_pass are v7_fast.cu's, so a PASS on the GPU checks the
    harness, not a variant."""
    def code(t):
        return [ln.strip() for ln in kernel_check.strip_comments(t).splitlines() if ln.strip()]

    shipped = build.kernel_source("v7_fast")
    (before, _), (between, line_between), (after, line_after) = lesson10.v7_around_steps()
    # the #line after the text and after load_dinp are v7_fast.cu's
    assert shipped.splitlines()[line_after - 1:] == after.splitlines()
    lines = between.splitlines()
    assert shipped.splitlines()[line_between - 1:line_between - 1 + len(lines)] == lines
    own = "".join(shipped[shipped.index(s):shipped.index("\n}\n", shipped.index(s)) + 3]
                  for s in lesson10.STEPS.values())
    assert code(student.solution_only(kernel_text("10_v7_one_pass"))) == code(own)
    spliced = lesson10.splice('#line 1 "yours_v7"\n' + own)
    assert spliced.count("float row_pass(") == 1 and spliced.count("void load_row(") == 1
    assert spliced.startswith('#line 1 "v7_fast.cu"')
    assert spliced.index("void load_row(") < spliced.index("void load_dinp(") < spliced.index(
        "float exchange(")


def test_lesson09_times_the_learner_against_v7s_register_path(monkeypatch):
    """The learner's row_pass runs on v7's register path at every C, so it is timed against that
    path, not against v7's default (rows staged in shared memory at the timing shape, which never
    runs row_pass)."""
    from rmsnorm_lessons.speed import bench

    timed = []

    class Problem:
        def __init__(self, N, C, dtype):
            self.N, self.C = N, C

        def free(self):
            pass

    def bench_version(version, N, C, copy_gbps, repeats=50, problem=None, *, config=None, **kw):
        timed.append((getattr(version, "name", version), config))
        return bench._timing(str(version), N, C, [0.05], 1000, copy_gbps)

    monkeypatch.setattr(bench, "DeviceProblem", Problem)
    monkeypatch.setattr(bench, "bench_version", bench_version)
    staged_off = ladder.v7_fast.Config(staged=False)
    line = kernel_check.time_against(ladder.get("v7_fast"), "v7_fast", config=staged_off,
                                     label="the register path")
    assert timed == [("v7_fast", None), ("v7_fast", staged_off)]
    assert line.endswith("the register path 0.050 ms")
    seen = {}
    from rmsnorm_lessons.course.verdict import failed

    # a verdict comes back (the GPU's PASS goes on to the twin's bounds check; this one stops)
    monkeypatch.setattr(kernel_check, "check_kernel",
                        lambda source, **kw: seen.update(kw) or failed("stand-in"))
    lesson10.check_v7_kernel("void load_row() {}\nfloat row_pass() {}")
    assert seen["like"] == "v7_fast" and seen["compare_config"] == staged_off
    assert "register path" in seen["compare_label"]


def test_the_row_plan_decision_is_judged_against_the_plan_here():
    import dataclasses

    from rmsnorm_lessons.core import gpu

    assert lesson10.row_plan(device=gpu.H200)[:2] == (256, 512 * 2 * 16 * 5)
    v = lesson10.check_row_plan(256, 81920, flat_kib=16, device=gpu.H200)
    assert v.passed, v
    for words in ("G = 256 threads", "81,920 bytes (80 KiB)", "5.0 times the 16 KiB",
                  "lesson 11 measures"):
        assert words in v.message, (words, v.message)
    for G, in_flight, says in [
            (None, 81920, "replace None"), (256, None, "replace None"),
            (512, 81920, "the row's chunks"), (2048, 81920, "not K channels"),
            (128, 81920, "G x K x 8 >= C"),
            (256, 65536, "this row's dinp is loaded too"), (256, 49152, "the next row's dout"),
            (256, 98304, "the next row's dinp is not prefetched"),
            (256, 40960, "the SM holds the whole block"), (256, 80, "not KiB"),
            (256, 5120, "16 bytes"), (256, 12345, "the plan runs 512 threads an SM")]:
        v = lesson10.check_row_plan(G, in_flight, flat_kib=16, device=gpu.H200)
        assert v.status == "NOT YET" and says in v.message, (G, in_flight, v.message)
    # both wrong: both said
    v = lesson10.check_row_plan(128, 49152, flat_kib=16, device=gpu.H200)
    assert "G 128" in v.message and "in_flight 49152" in v.message
    # the plan of another GPU: the same row plan (one block of 512 an SM holds the registers)
    small = dataclasses.replace(gpu.H200, multiprocessors=66)
    assert lesson10.check_row_plan(256, 81920, flat_kib=16, device=small).passed


def test_the_openings_are_v6_then_v7s_register_path():
    before, after = lesson10.OPENINGS["before"], lesson10.OPENINGS["after"]
    assert before[:3] == ("v6_last_block", 16384, 4096) and after[:3] == ("v7_fast", 16384, 4096)
    assert after[3] == ladder.v7_fast.Config(staged=False)
    assert set(lesson10.THIS_LESSON) == {"few_loads_in_flight", "barriers"}


@pytest.mark.skipif(__import__("rmsnorm_lessons.core.gpu", fromlist=["gpu"]).available(),
                    reason="the saved opening: a GPU measures its own")
def test_a_diagnosis_by_a_figure_the_saved_opening_lacks_is_not_verified():
    before = lesson10.opening()
    if before.figure("stall:barrier") is not None:
        pytest.skip("the saved run measured it: the diagnosis is judged (tests/test_student.py)")
    verdict = lesson10.check_diagnosis("latency", "barriers", "stall:barrier", None)
    assert verdict.status == "NOT VERIFIED" and "run the opening on a GPU" in verdict.message
    # a reading the saved run cannot judge is NOT VERIFIED whatever its value (round 2, rule 2);
    # one its names alone refute is NOT YET (lessons/diagnosis.py)
    assert lesson10.check_diagnosis("memory", "barriers", "stall:barrier", 1.0).status == \
        "NOT VERIFIED"
    assert lesson10.check_diagnosis("latency", "barriers", "time_ms", 0.3).status == "NOT YET"


# --- round 2 (walk-through 03-10): the exercise judged on the CPU twin, the spill message --------

def _solution_spliced() -> str:
    from rmsnorm_lessons.lessons.lesson10 import exercise

    return exercise.splice('#line 1 "yours_v7"\n' + kernel_text("10_v7_one_pass"))


def test_the_twin_builds_v7s_register_path_alone():
    """The twin's text is v7_fast.cu with the learner's steps, four lines of v7's own code
    replaced line for line (no inline PTX, no staged or cluster path), and a plan of one row group
    a block, so the named barrier it makes a __syncthreads orders the same threads."""
    from rmsnorm_lessons.core import gpu
    from rmsnorm_lessons.lessons.lesson10 import on_cpu
    from rmsnorm_lessons.twin import scan

    spliced = _solution_spliced()
    text = on_cpu.twin_text(spliced)
    assert text.count("\n") == spliced.count("\n")
    assert scan.refusals(text, "yours_v7") == []
    code = scan.blank_comments(text)
    assert "asm" not in code and '#include "v7_' not in code
    with pytest.raises(ValueError, match="v7_fast.cu changed"):
        on_cpu.twin_text(spliced.replace('#include "v7_wide.cuh"\n', ""))
    for C, overwrite in ((1600, False), (776, False), (264, False), (4096, True), (8, False)):
        layout = ladder.v7_fast.row_layout(C, overwrite=overwrite)
        launches = on_cpu.one_group_a_block(129, C, gpu.H200, block=512, overwrite=overwrite)
        main = launches[0]
        assert main.kernel == "rmsnorm_backward_v7" and main.block == layout.group
        assert dict(main.args)["G"] == layout.group and dict(main.args)["K"] == layout.K
    # one shape where the plan prefetches and each block takes several rows
    assert any(ladder.v7_fast.row_layout(C).prefetch and sms for _, C, sms in on_cpu.SHAPES)


def _on_cpu_only():
    from rmsnorm_lessons import twin
    from rmsnorm_lessons.core import gpu

    if gpu.available():
        pytest.skip("a GPU judges the exercise here")
    if twin.available() is not None:
        pytest.skip(twin.available())


@needs_nvcc
@pytest.mark.parametrize("old,new,says", [
    ("sum[k] += inp_k * r * dout_k;", "sum[k] += inp_k * dout_k;", "dweight is wrong"),
    ("dot += widen(wj, k) * dout_k * inp_k;", "dot += widen(wj, k) * dout_k * dout_k;",
     "dinp is wrong")], ids=["norm without r", "dout * dout in the dot"])
def test_a_wrong_row_pass_is_not_yet_on_the_cpu(old, new, says):
    """The walk-through's two slips, NOT VERIFIED before (the twin refused v7_fast.cu)."""
    _on_cpu_only()
    text = kernel_text("10_v7_one_pass")
    assert text.count(old) == 1
    verdict = lesson10.check_v7_kernel(text.replace(old, new))
    assert verdict.status == "NOT YET", verdict.message
    assert verdict.message.startswith("on the CPU twin") and says in verdict.message
    assert "register path alone" in verdict.message, verdict.message


@needs_nvcc
def test_the_solution_passes_on_the_cpu_saying_which_build_ran():
    _on_cpu_only()
    verdict = lesson10.check_v7_kernel(kernel_text("10_v7_one_pass"))
    assert verdict.status == "PASS", verdict.message
    for words in ("on the CPU twin", "67x1032/2SMs", "The twin ran v7's register path alone",
                  "the GPU runs the whole file", "cannot judge speed"):
        assert words in verdict.message, (words, verdict.message)


@needs_nvcc
def test_local_memory_is_named_by_what_the_compiler_reports():
    """The walk-through's row_pass (products beside a and b) spills at the 128-register cap: the
    message says so, not 'an array indexed at run time'; an array indexed at run time is found in
    the PTX and named as such."""
    text = kernel_text("10_v7_one_pass")
    body = text[text.index("        float sum[8] = {a.x"):
                text.index("        if (chunk < p.chunks) { sums(p, 0, chunk) = a;")]
    products = ("        float prod[8];\n        #pragma unroll\n"
                "        for (int k = 0; k < 8; k++) {\n"
                "            prod[k] = widen(x[j], k) * r * widen(g[j], k);\n"
                "            dot += widen(wj, k) * widen(g[j], k) * widen(x[j], k);\n        }\n"
                "        a.x += prod[0]; a.y += prod[1]; a.z += prod[2]; a.w += prod[3];\n"
                "        b.x += prod[4]; b.y += prod[5]; b.z += prod[6]; b.w += prod[7];\n")
    verdict = lesson10.check_v7_kernel(text.replace(body, products))
    assert verdict.status == "NOT YET", verdict.message
    for words in ("128 registers a thread", "B of spill stores", "__launch_bounds__(512, 1)",
                  "more values are live at once", "one set of 8 fp32"):
        assert words in verdict.message, (words, verdict.message)
    assert "run time" not in verdict.message.split(". nvcc compiled")[0]
    indexed = text.replace("sum[k] += inp_k * r * dout_k;", "sum[(k + p.t) & 7] += inp_k * r * "
                           "dout_k;")
    verdict = lesson10.check_v7_kernel(indexed)
    assert verdict.status == "NOT YET", verdict.message
    assert "local array of 32 B" in verdict.message and "run time" in verdict.message


def test_a_diagnosis_the_saved_opening_cannot_judge_is_not_verified_never_not_yet():
    """Round 2, rule 2: without v6's profile at 16384 x 4096 in the saved run, a well-formed
    diagnosis is NOT VERIFIED saying which figure is missing; a malformed one is still NOT YET
    (nothing of it needs a figure)."""
    from rmsnorm_lessons.course import investigate

    profile = investigate._empty("v6_last_block", 16384, 4096, "not in the saved run")
    saved = investigate.Opening("v6_last_block", (16384, 4096), None, None, profile,
                                source="saved on NVIDIA H100 80GB HBM3, 2026-12-05")
    for answer in [("latency", "barriers", "stall:barrier", 34),
                   ("memory", "few_loads_in_flight", "dram_pct", 58.5),
                   ("latency", "few_loads_in_flight", "occupancy_pct", 48)]:
        verdict = lesson10.check_diagnosis(*answer, before=saved)
        assert verdict.status == "NOT VERIFIED", (answer, verdict.message)
        assert "not in the saved run" in verdict.message and "run the opening on a GPU" in \
            verdict.message
    for answer, says in [(("fast", "barriers", "stall:barrier", 34), "the bound"),
                         (("latency", "slow", "stall:barrier", 34), "the cause"),
                         (("latency", "barriers", "stall:nonsense!", 34), "not a figure"),
                         (("latency", "barriers", "stall:barrier", "many"), "a number")]:
        verdict = lesson10.check_diagnosis(*answer, before=saved)
        assert verdict.status == "NOT YET" and says in verdict.message, (answer, verdict.message)


def test_the_notebook_opens_and_closes_without_a_gpu_cell():
    """Round 2, rule 1, and the walk-through's leak: the opening and what changed are no %%gpu
    cells; the guess meets the two times of what changed (the separate timing cell is gone); the
    row-layout picture, which shows G, is not in the core path above the exercise (round 3:
    Explore).
    Round 3 moved the printed kernel parts to Explore too: the exercise's text names each call its
    steps make, and Explore prints the parts, without the loop around them first."""
    import _lesson_support as nbs
    from test_lesson09_notebook import _gpu_free

    _gpu_free("10_v7_one_pass")
    cells = nbs.cells("10_v7_one_pass")
    core = nbs.core(cells)
    assert [c["id"] for c in core if "gpu" in nbs.tags(c)] == []
    [decision] = [i for i in nbs.tagged(cells, "decision") if "BEGIN SOLUTION" in
                  nbs.text(cells[i])]
    [prediction] = nbs.tagged(cells, "prediction")
    [exercise] = nbs.tagged(cells, "kernel-exercise")
    assert decision < prediction < exercise
    [picture] = [i for i, c in enumerate(cells) if "v7_row_layout(4096)" in nbs.text(c)]
    assert picture >= len(core), "the picture shows G: not in the core path"
    [versus] = [i for i, c in enumerate(core) if "predict.versus(mine_v7" in nbs.text(c)]
    assert nbs.tagged(cells, "what-changed")[0] < versus
    assert "after.timing.ms" in nbs.text(cells[versus])
    # what the exercise uses is named in its own text, and printed in Explore, apart from the loop
    told = nbs.text(cells[exercise - 1])
    for call in ("p.chunk(j)", "p.chunks", "widen(v, k)", "sums(p, half, chunk)", "Explore"):
        assert call in told, call
    [printed] = [i for i, c in enumerate(cells) if "kernel_part(\"v7_fast\", part)" in nbs.text(c)]
    assert printed >= len(core)
    assert "'backward'" not in nbs.text(cells[printed]) and "'sums'" in nbs.text(cells[printed])


@pytest.mark.parametrize("answer, says, never", [
    (256, "8192 channels hold the row's 6144, but 64 of the 256 threads", "fewer than"),
    (96, "3072 channels, fewer than the row's 6144", "hold none"),
    (191, "6112 channels, fewer than the row's 6144", "hold none"),
    (200, "a multiple of 32", "fewer than"),
])
def test_a_wrong_group_size_is_refused_with_a_true_reason(answer, says, never):
    """Walk-through 2 (10, Q1): G = 256 was refused as if it did not hold the row (256 x 4 x 8 =
    8192 >= 6144 does); the reason now says what is wrong with each answer."""
    import re

    verdict = lesson10.check_group_size(answer)
    assert verdict.status == "NOT YET" and says in verdict.message, verdict.message
    assert never not in verdict.message, verdict.message
    assert not re.search(r"\b192\b", verdict.message), "the reason does not give the answer"
    assert lesson10.check_group_size(192).passed


# --- round 3 (the walk-through of 2026-12-06): the sums written back past the row ----------------

def test_a_sums_write_back_without_the_chunk_guard_gets_the_bounds_reason(monkeypatch):
    import ast

    from _lesson_support import cells, tagged, text

    from rmsnorm_lessons.core import build, gpu
    from rmsnorm_lessons.lessons import lesson10

    if build.find_nvcc() is None:
        pytest.skip("nvcc not found")
    monkeypatch.setattr(gpu, "why_unavailable", lambda: "hidden by the test")
    [at] = tagged(cells("10_v7_one_pass"), "kernel-exercise")
    solution = ast.parse(text(cells("10_v7_one_pass")[at])).body[0].value.value
    guarded = "if (chunk < p.chunks) { sums(p, 0, chunk) = a; sums(p, 1, chunk) = b; }"
    assert solution.count(guarded) == 1
    verdict = lesson10.check_v7_kernel(
        solution.replace(guarded, "sums(p, 0, chunk) = a; sums(p, 1, chunk) = b;"), sanitize=False)
    assert verdict.status == "NOT YET", verdict
    assert "no chunk < p.chunks guard" in verdict.message, verdict
    assert "another thread's shared memory" in verdict.message, verdict
    assert "keep one set of 8 fp32" not in verdict.message, verdict
