"""The mutation suite: plausible slips written into every kernel exercise's solution must be judged
NOT YET by the exercise's own check (issue 27, item 4).

The slip classes are in :mod:`tests._mutations` (a function each, ``text -> [(id, mutated text)]``,
at most ``CAP`` = 2 mutants per class and exercise); the solution texts are read from the notebooks
when the tests are collected, so the suite follows the notebooks. ``tests/_mutation_report.py``
prints the mutation score in the terminal summary.

Mutants per class and exercise (each - names why the class has no site there):

=================  =======  =======  ======  ======  =======  ====  =====  ====  ====  ==========
exercise           barrier  normal.  stride  atomic  shuffle  tail  width  sign  term  its own
=================  =======  =======  ======  ======  =======  ====  =====  ====  ====  ==========
02 v1 (fp32)       -a       1        2       1       -b       2     2      1     2
03 v2 (fp32)       -a       1        2       1       2        2     2      1     2     layout 2
04 v3 (fp32)       2        1        2       2       1        2     2      1     2     layout 2
05 v4 draft        2        1        2       2       1        2     2      1     1     overwrite 1
06 v4 (bf16)       2        1        2       2       1        2     2      1     1     hint 2,
                                                                                      staging 1,
                                                                                      banks 2,
                                                                                      overwrite 1
07 v5 partials     -i       -j       2       -c      -j       2     2      -j    -j    offset 2,
                                                                                      order 1,
                                                                                      narrow 1
08 v6 last block   2        -j       2       1       -j       2     2      -j    -j    fence 2,
                                                                                      limit 1,
                                                                                      offset 2
09 scale_wide      -a       -d       2       -e      -b       2     2      -d    -d    chunks 1
10 v7 two steps    -f       -g       2       -e      -h       2     2      -g    -g    rstd 1,
                                                                                      operand 1
13 seed loop       2        1        2       -k      1        2     2      1     1
=================  =======  =======  ======  ======  =======  ====  =====  ====  ====  ==========

a: no shared memory, so no barrier. b: no warp exchange (one thread per row; scale_wide's threads
share nothing). c: v5 is atomic-free by design (its check forbids atomics). d: y = a * x divides
by nothing and has no gradient's terms. e: no atomic (every thread owns its outputs; row_pass's
sums are this thread's alone). f: load_row and row_pass have no barrier (v7's are in the shipped
code around them). g: the mean's division and term 2's subtraction are in v7's shipped code, not
in the two steps. h: row_pass returns this thread's part; exchange() (shipped) sums the lanes.
i: the barriers of v5's row pass are bf16_row_pass.cuh's, shipped (the exercise starts after it).
j: the row's mean, its warp exchange and its terms are the shipped row pass's. k: the row pass v5
and v6 share adds in warp order, with no atomic. Every exercise has at least four classes,
counting its lesson's own (tests/_mutations_extra.py, tried on that exercise alone: a lane's columns
taken as a block of its own in 03 and 04, right numbers and uncoalesced loads that the CPU twin's
record of every access catches; a cache hint dropped and staged() returning c in 06; a block's
partials at block 0's place in 07 and 08; a fence dropped and the seed's atomicInc limit in 08; dinp
never loaded in 05 and 06, staged() returning C - 1 - c or (c + 1) % C in 06 (right results, the
8-way bank conflict kept: class banks), the blocks summed in reverse order and the partials stored
a float at a time in 07; each thread's chunks made neighbours in 09, which the CPU twin's probe of
every chunk's owner catches; rstd dropped from norm and the dot product reading dout twice in 10,
the walk-through's slips).

``barrier`` leaves out a barrier whose removal no run can see (v5's and v6's barrier after
zeroing the shared sums: warp 0 reads them only after the row loop's own barriers). Lesson 13's
text is the row pass without the kernel's ``__shared__`` declaration, so its zeroing barrier is
mutated there, and its check's count of BAR.SYNC against v6's catches it.
``shuffle`` covers the butterfly loop starting at offset 8 or stopping before offset 1, a
``__shfl_xor_sync`` step removed, and, where the text calls common.cuh's ``warp_reduce_sum``, the
whole exchange skipped (the lane's own part used as the row's sum). ``width`` covers a 128-bit
load or store moving 8 bytes (a ``load64``/``store64`` helper of the mutant's own) and an fp32
location receiving a bf16-rounded value. ``sign`` flips term 2's sign (``dnorm + norm * mean``);
``term`` drops term 2 from dinp, or the weight from the row's dot product (issue 41: slips the
compile and the SASS cannot see, which only a run on a GPU judges).

Without a GPU (in ``make test``: a sample, the rest marked slow): every mutant compiles, the slips
the static checks must catch (:data:`CAUGHT_WITHOUT_A_GPU`) are NOT YET, and the CPU twin
(:mod:`rmsnorm_lessons.twin`, issue 46) judges the rest: every mutant is NOT YET (lesson 10's on
the twin's build of v7's register path alone, rmsnorm_lessons/lessons/lesson10/on_cpu.py, since
the whole v7_fast.cu has what the twin does not model). On a GPU (marker ``gpu``, one
test per mutant, parallel-safe under pytest-xdist): every mutant is NOT YET
(tests/test_twin_gpu.py checks that the twin and the GPU give the same verdicts). Run it with
``pytest -n 8 --dist load -m gpu tests/test_mutations.py``: the Makefile's
``--dist loadfile`` would give every mutant of this file to one worker.
"""
from __future__ import annotations

import json

import _mutations
import pytest

from rmsnorm_lessons import twin
from rmsnorm_lessons.core import build, gpu, ladder
from rmsnorm_lessons.course import registry

MUTANTS = _mutations.all_mutants()
BY_NODE = {m.node: m for m in MUTANTS}
#: the exercises' classes with no site, and why (the table above says the same)
NO_SITE = {
    ("02_naive", "barrier"): "no shared memory", ("02_naive", "shuffle"): "one thread per row",
    ("03_warp_per_row", "barrier"): "no shared memory",
    ("07_two_pass", "atomic"): "atomic-free by design",
    ("07_two_pass", "barrier"): "the row pass's barriers are shipped",
    ("07_two_pass", "normalisation"): "the mean is the shipped row pass's",
    ("07_two_pass", "shuffle"): "the warp exchange is the shipped row pass's",
    ("08_last_block", "normalisation"): "the mean is the shipped row pass's",
    ("08_last_block", "shuffle"): "the warp exchange is the shipped row pass's",
    ("07_two_pass", "sign"): "term 2 is the shipped row pass's",
    ("07_two_pass", "term"): "term 2 is the shipped row pass's",
    ("08_last_block", "sign"): "term 2 is the shipped row pass's",
    ("08_last_block", "term"): "term 2 is the shipped row pass's",
    ("09_bytes_in_flight", "barrier"): "no shared memory",
    ("09_bytes_in_flight", "normalisation"): "y = a * x",
    ("09_bytes_in_flight", "atomic"): "every thread owns its outputs",
    ("09_bytes_in_flight", "shuffle"): "no warp exchange",
    ("10_v7_one_pass", "barrier"): "v7's barriers are shipped code",
    ("10_v7_one_pass", "normalisation"): "the mean is v7's shipped code",
    ("10_v7_one_pass", "atomic"): "the sums are this thread's alone",
    ("10_v7_one_pass", "shuffle"): "exchange() is v7's shipped code",
    ("13_finding_bugs", "atomic"): "the row pass adds in warp order",
    ("09_bytes_in_flight", "sign"): "y = a * x has no gradient's terms",
    ("09_bytes_in_flight", "term"): "y = a * x has no gradient's terms",
    ("10_v7_one_pass", "sign"): "term 2 is v7's shipped code",
    ("10_v7_one_pass", "term"): "term 2 is v7's shipped code",
}
#: (exercise, class.kind) -> the static check that must catch it without a GPU
CAUGHT_WITHOUT_A_GPU = {
    ("02_naive", "atomic.global"): "a global atomic (REDG/ATOMG) on dweight",
    ("03_warp_per_row", "atomic.global"): "a global atomic (REDG/ATOMG) on dweight",
    ("03_warp_per_row", "shuffle.first"): "five SHFL.BFLY",
    ("03_warp_per_row", "shuffle.last"): "five SHFL.BFLY",
    ("04_shared_memory", "barrier.syncthreads"): "two BAR.SYNC",
    ("04_shared_memory", "atomic.shared"): "a shared-memory atomic (ATOMS)",
    ("04_shared_memory", "atomic.global"): "a global atomic per block and channel",
    ("05_bf16", "barrier.syncthreads"): "two BAR.SYNC",
    ("05_bf16", "atomic.shared"): "a shared-memory atomic (ATOMS)",
    ("05_bf16", "atomic.global"): "a global atomic for the flush",
    ("05_bf16", "width.load"): "no row access narrower than 128 bits",
    ("05_bf16", "width.store"): "a 128-bit store (STG.E.128)",
    ("05_bf16", "overwrite.dinp"): "dinp's old values loaded (source)",
    ("06_vectorized", "overwrite.dinp"): "dinp's old values loaded (source)",
    ("07_two_pass", "narrow.partials"): "no STG narrower than 128 bits in the first kernel",
    ("06_vectorized", "barrier.syncthreads"): "two BAR.SYNC",
    ("06_vectorized", "atomic.shared"): "a shared-memory atomic (ATOMS)",
    ("06_vectorized", "atomic.global"): "a global atomic for the flush",
    ("06_vectorized", "width.load"): "seven LDG.E.128",
    ("06_vectorized", "width.store"): "a 128-bit store (STG.E.128)",
    ("06_vectorized", "hint.load"): "two LDG.E.EF.128",
    ("06_vectorized", "hint.store"): "a hinted 128-bit store",
    ("06_vectorized", "staging.slot"): "staged() is not slot c",
    ("08_last_block", "atomic.ticket"): "an atomic ticket (ATOMG)",
    ("08_last_block", "fence.release"): "a MEMBAR before the ATOMG",
    ("08_last_block", "fence.acquire"): "a second MEMBAR",
    ("08_last_block", "limit.seed"): "atomicInc's limit is not gridDim.x",
    ("09_bytes_in_flight", "width.load"): "UNROLL LDG.E.128",
    ("09_bytes_in_flight", "width.store"): "a 128-bit store (STG.E.128)",
    ("10_v7_one_pass", "width.load"): "as many LDG.E.128 as v7_fast",
    ("13_finding_bugs", "barrier.syncthreads"): "as many BAR.SYNC as v6_last_block",
    ("13_finding_bugs", "width.load"): "as many LDG.E.128 as v6_last_block",
}
#: static checks that do not yet catch what CAUGHT_WITHOUT_A_GPU asks of them (a strict xfail: when
#: the check is fixed the test says XPASS and the entry goes)
KNOWN_GAPS: dict = {}
#: run in `make test` without a GPU: per exercise its first mutant the static checks must catch,
#: and its first one only a GPU can judge
SAMPLE = {
    m.node for lesson in registry.kernel_exercises() for caught in (True, False)
    for m in [next((m for m in MUTANTS if m.exercise == lesson.stem
                    and ((m.exercise, m.kind) in CAUGHT_WITHOUT_A_GPU) == caught), None)] if m}
NVCC_REJECTS = "nvcc does not accept it"
CPU_TWIN = "on the CPU twin"
#: exercises whose text uses what the CPU twin does not model (none: lesson 10's runs on the
#: twin's build of v7's register path alone)
NEEDS_A_GPU: tuple = ()
_CONTEXT_LOST = ""  # the GPU test that made this process's CUDA context unusable

needs_nvcc = pytest.mark.skipif(build.find_nvcc() is None, reason="nvcc not found")
no_gpu_here = pytest.mark.skipif(gpu.available(),
                                 reason="checks what is said where there is no GPU")


@pytest.fixture(autouse=True, scope="module")
def _forget_learners_rungs():
    """The checks register yours_v1..yours_v7; later test modules see the shipped ladder only."""
    yield
    for name in [v for v in ladder.VERSIONS if v.startswith("yours_")]:
        ladder.unregister(name)


def _record(record_property, mutant, status: str, stage: str) -> None:
    """What tests/_mutation_report.py sums up (xdist carries it to the controller)."""
    record_property("mutation", json.dumps({"node": mutant.node, "exercise": mutant.exercise,
                                            "id": mutant.id, "status": status, "stage": stage}))


def _check(mutant):
    return _mutations.check_function(registry.by_stem(mutant.exercise))(mutant.text)


# --- the mutants themselves (no nvcc) ----------------------------------------------------------

@pytest.mark.parametrize("lesson", registry.kernel_exercises(), ids=lambda l: l.stem)
def test_every_kernel_exercise_yields_its_classes(lesson):
    mutants = [m for m in MUTANTS if m.exercise == lesson.stem]
    solution = _mutations.solution_text(lesson)
    classes = {m.cls for m in mutants}
    missing = {cls for cls in _mutations.CLASSES if cls not in classes}
    assert missing == {cls for (stem, cls) in NO_SITE if stem == lesson.stem}, (
        f"{lesson.stem}: classes without a mutant {sorted(missing)}; update NO_SITE and the "
        "table in this module's docstring if the notebook changed")
    own = _mutations.EXTRA.get(lesson.stem, ())
    assert set(own) <= classes, f"{lesson.stem}: its lesson's own slips found no site"
    assert len(classes) >= 4
    assert len({m.id for m in mutants}) == len(mutants), "mutant ids are unique"
    for m in mutants:
        assert m.text != solution, f"{m.id} is the solution itself"
        assert sum(m.text.count(b) for b in "({[") == sum(m.text.count(b) for b in ")}]"), m.id
    for cls in _mutations.CLASSES + own:
        assert sum(m.cls == cls for m in mutants) <= _mutations.CAP


def test_the_slips_find_their_sites_in_a_small_kernel():
    text = ("#include \"common.cuh\"\n__global__ void k(float* out, const float* in, int N, "
            "int C) {\n    __shared__ float s[32];\n    for (int c = threadIdx.x; c < C; c += "
            "blockDim.x) s[c] = 0.0f;\n    __syncthreads();\n"
            "    float v = s[0] + in[threadIdx.x] / C;\n"
            "    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffff, "
            "v, offset);\n    // atomicAdd(&out[0], v); in a comment is no site\n"
            "    if (threadIdx.x < N) atomicAdd(&out[threadIdx.x], v);\n}\n")
    found = {cls: [i for i, _ in _mutations.SLIPS[cls](text)] for cls in _mutations.CLASSES}
    assert found["barrier"] == ["barrier.syncthreads@5"]
    assert found["normalisation"] == ["normalisation.mean@6"]
    assert found["atomic"] == ["atomic.global@9"]
    assert found["shuffle"] == ["shuffle.first@7", "shuffle.last@7"]
    assert found["tail"] == ["tail.column@4", "tail.row@9"]
    mutated = dict(_mutations.atomic(text))["atomic.global@9"]
    assert "out[threadIdx.x] += v;" in mutated and "// atomicAdd(&out[0], v);" in mutated
    normalised = dict(_mutations.normalisation(text))["normalisation.mean@6"]
    assert "in[threadIdx.x] / (C + 1)" in normalised


def test_the_score_line_counts_and_names_the_survivors():
    import _mutation_report

    def record(stage, gpu=True, id="tail.row@9"):
        return {"gpu": gpu, "stage": stage, "exercise": "06_vectorized", "id": id}

    lines = _mutation_report.score_lines([
        record("GPU"), record("compile-only"), record("survived", id="normalisation.mean@36"),
        record("needs a GPU", gpu=False), record("compile-only", gpu=False),
        record("CPU twin", gpu=False), record("survived", gpu=False, id="stride.loop@20")])
    assert lines == ["mutation score: 2/3 caught (compile-only 1, GPU 1); survivors: lesson06 "
                     "normalisation.mean@36; rejected by nvcc: none",
                     "mutation score without a GPU: 2/3 caught (compile-only 1, CPU twin 1), 1 "
                     "need a GPU to be judged; survivors: lesson06 stride.loop@20; rejected by "
                     "nvcc: none"]


# --- without a GPU: compiled and inspected -----------------------------------------------------

def _judge_without_a_gpu(mutant, record_property, request):
    gap = KNOWN_GAPS.get((mutant.exercise, mutant.kind))
    if gap:
        request.applymarker(pytest.mark.xfail(reason=gap, strict=True))
    verdict = _check(mutant)
    rejected = verdict.message.startswith(NVCC_REJECTS)
    caught = (mutant.exercise, mutant.kind) in CAUGHT_WITHOUT_A_GPU
    on_cpu = verdict.message.startswith(CPU_TWIN)
    _record(record_property, mutant, verdict.status, "nvcc rejected" if rejected else
            "survived" if verdict.status == "PASS" else
            ("CPU twin" if on_cpu else "compile-only") if verdict.status == "NOT YET" else
            "needs a GPU")
    assert not rejected, f"{mutant.node}: a mutant must compile\n{verdict}"
    assert verdict.status in ("NOT YET", "NOT VERIFIED"), f"{mutant.node}: {verdict}"
    if twin.available() is None and mutant.exercise not in NEEDS_A_GPU:
        assert verdict.status == "NOT YET", f"{mutant.node} survived the CPU twin: {verdict}"
    if caught:
        assert verdict.status == "NOT YET", (
            f"{mutant.node}: the static checks must catch it "
            f"({CAUGHT_WITHOUT_A_GPU[mutant.exercise, mutant.kind]})\n{verdict}")


@needs_nvcc
@no_gpu_here
@pytest.mark.parametrize("node", sorted(SAMPLE))
def test_a_sample_of_mutants_without_a_gpu(node, record_property, request):
    _judge_without_a_gpu(BY_NODE[node], record_property, request)


@needs_nvcc
@no_gpu_here
@pytest.mark.slow
@pytest.mark.parametrize("node", [m.node for m in MUTANTS if m.node not in SAMPLE])
def test_every_mutant_without_a_gpu(node, record_property, request):
    _judge_without_a_gpu(BY_NODE[node], record_property, request)


# --- on a GPU: every mutant NOT YET ------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.timeout(300)  # a mutant that hangs its kernel fails alone
@pytest.mark.parametrize("node", [m.node for m in MUTANTS])
def test_every_mutant_is_not_yet_on_the_gpu(node, record_property, monkeypatch):
    global _CONTEXT_LOST
    mutant = BY_NODE[node]
    if _CONTEXT_LOST:  # a check that runs the kernel in this process: its error is sticky
        _record(record_property, mutant, "NOT JUDGED", "not judged")
        pytest.fail(f"not judged: {_CONTEXT_LOST} left this worker's CUDA context unusable")
    with monkeypatch.context() as hidden:  # what the compile and the static checks alone say
        hidden.setattr(gpu, "why_unavailable", lambda: "hidden by the mutation test")
        hidden.setattr(twin, "available", lambda: "hidden by the mutation test")
        static = _check(mutant)
    verdict = _check(mutant)
    try:
        gpu.synchronize()
    except Exception as exc:  # an illegal address in this process: later mutants here cannot run
        _CONTEXT_LOST = f"{node} ({type(exc).__name__})"
    rejected = verdict.message.startswith(NVCC_REJECTS)
    stage = ("nvcc rejected" if rejected else "survived" if verdict.status != "NOT YET"
             else "compile-only" if static.status == "NOT YET" else "GPU")
    _record(record_property, mutant, verdict.status, stage)
    assert not rejected, f"{node}: a mutant must compile\n{verdict}"
    assert verdict.status == "NOT YET", f"{node} survived its check: {verdict}"
