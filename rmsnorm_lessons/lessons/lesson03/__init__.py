"""Lesson 03: v2_warp, one warp per row.

The lesson opens with v1 measured (:func:`opening`: its time and Nsight Compute profile, no
reading) and the learner's diagnosis of it (:func:`check_diagnosis`, judged by
:func:`rmsnorm_lessons.course.diagnose.check` against that profile). Then the design decision,
:func:`~.decision.check_butterfly` (the shuffle offsets and each lane's columns, simulated), the
kernel exercise :func:`check_v2_kernel` (v2 whole, from its signature), what changed from v1 to v2
(``opening(after=True)``), and the end-of-lesson questions.
"""
from __future__ import annotations

from ...course.verdict import Verdict, choice_verdict, failed, passed, read_number, read_numbers
from ...inspection import access
from .decision import DESIGN_C, check_butterfly, design_picture  # noqa: F401
from .plots import butterfly, columns_strip, speedup_bars  # noqa: F401

WARP = access.WARP  # lanes in a warp
#: the shape the lesson measures: the seed's
N, C = 8192, 1024
#: the causes v2 removes (a diagnosis naming another supported one passes, and is told so)
THIS_LESSON = ("uncoalesced", "few_threads")
_OPENINGS: dict = {}


def opening(after: bool = False):
    """The rung before this lesson's, v1_naive, at the seed's shape (``after=True``: this lesson's
    v2_warp, measured the same way): time and Nsight Compute profile on this GPU, else the saved
    run's (:func:`rmsnorm_lessons.course.investigate.opening`). Measured once per process, so the
    diagnosis is judged against the figures the opening cell showed."""
    version = "v2_warp" if after else "v1_naive"
    if version not in _OPENINGS:
        from ...course import investigate

        _OPENINGS[version] = investigate.opening(version, N, C)
    return _OPENINGS[version]


def check_diagnosis(bound, cause, metric, value) -> Verdict:
    """The learner's diagnosis of v1's profile (:func:`opening`): ``bound`` (memory or latency),
    ``cause`` (a name of :data:`rmsnorm_lessons.course.diagnose.CAUSES`), ``metric`` (the figure
    that shows it) and ``value`` (that figure as the profile shows it)."""
    from ...course import diagnose

    return diagnose.check(opening(), bound=bound, cause=cause, metric=metric, value=value,
                          this_lesson=THIS_LESSON, rung="v2_warp")


# --- the kernel exercise: v2 whole, from its signature
# ---------------------------------------------

def check_v2_kernel(source: str, sanitize: bool = True) -> Verdict:
    """Lesson 03's kernel exercise: the learner's ``rmsnorm_backward_v2`` (one warp per row, the
    butterfly written inline), checked as the rung ``yours_v2`` with v2_warp's plan, and timed
    beside v2_warp; then its accesses on the CPU twin (:mod:`...course.checking.coalescing`, the
    same verdict with or without a GPU): a right v2 whose lanes each take a block of columns is
    NOT YET. compute-sanitizer's race check runs by default; ``sanitize=False`` skips it, for
    speed."""
    from ...course.checking import coalescing
    from ...course.checking import kernel as kc

    kernel = "rmsnorm_backward_v2"
    verdict = kc.check_kernel(
        source, name="yours_v2", like="v2_warp", sanitize_it=sanitize,
        static=(kc.sass_lacks(("SHFL.DOWN", "SHFL.UP"), "no one-way shuffle (SHFL.DOWN/UP)",
                              "__shfl_down_sync leaves the row's sum in lane 0 only, but every "
                              "lane needs it for its own columns: use __shfl_xor_sync (the "
                              "butterfly)", kernel=kernel),
                _butterfly_in_sass(kernel),
                kc.sass_has(kc.GLOBAL_ATOMICS, "a global atomic adds to dweight",
                            "dweight[c] takes one addition per row: use atomicAdd", kernel=kernel),
                kc.no_local_memory(kernel)))
    return coalescing.judged(verdict, "yours_v2", kernel_name="yours_v2")


def _butterfly_in_sass(kernel: str):
    """Five SHFL.BFLY in the SASS; where the text calls __shfl_xor_sync and the SASS has none, the
    compiler removed them: their result is never used (the mean taken before the butterfly)."""
    from ...course.checking import kernel as kc

    has = kc.sass_has("SHFL.BFLY", "five butterfly shuffles (SHFL.BFLY)",
                      "the butterfly needs log2(32) = 5 __shfl_xor_sync steps, the offsets "
                      "you decided", kernel=kernel, at_least=5)

    def test(c):
        shuffles = [i for i in c.instructions(kernel) if i.opcode.startswith("SHFL")]
        calls = c.text.count("__shfl_xor_sync")
        if c.listing is None or shuffles or not calls:
            return has.test(c)
        return (f"your code calls __shfl_xor_sync ({calls} call{'s' * (calls > 1)} in the text), "
                "but the SASS has no SHFL at all: the compiler removed the shuffles because their "
                "result is never used. Is the row's sum read after the butterfly, or is the mean "
                "computed before it?")

    return kc.Static(has.what, test)


# --- the end-of-lesson questions (no cell prints their answers)


def check_lane_columns(C: int, lane: int, columns) -> Verdict:
    """``columns``: how many columns lane ``lane`` handles in v2's loops (``c = lane; c < C; c +=
    32``)."""
    got, verdict = read_number(columns, "of columns with your answer (a number or an expression)",
                               whole=True)
    if verdict is not None:
        return verdict
    C, lane = int(C), int(lane)
    want = len(range(lane, C, WARP))
    if got == want:
        return passed(f"{want}: columns {lane}, {lane + WARP}, ... up to {lane + WARP * (want - 1)}"
                      f"; when C is no multiple of 32, the low lanes take one column more")
    if got == C // WARP + 1 or got == -(-C // WARP):
        return failed(f"that is the count of lane 0; lane {lane} starts later: is its last "
                      f"column still below C = {C}?")
    if got == C / WARP:
        return failed("a lane takes whole columns: count them")
    return failed(f"list them: {lane}, {lane + WARP}, {lane + 2 * WARP}, ... while below C")


def check_small_n(answer) -> Verdict:
    """v2 at N = 64 rows, 8 rows per block, on a 132-SM H200: a) every SM gets a block; b) most
    SMs stay idle; c) each SM gets 8 blocks."""
    return choice_verdict(
        answer, "b", why="64 rows are 8 blocks for 132 SMs: a small N cannot fill the GPU however "
                         "coalesced the loads (the small shapes of the bench are latency-bound)",
        why_not={"a": "count the blocks: 64 rows at 8 rows per block",
                 "c": "8 is the rows per block; how many blocks are there?"})


def check_v2_redg(N: int, C: int, redg_count, sectors_each) -> Verdict:
    """v2 at (N, C): ``redg_count``, the warp-wide global atomic instructions (REDG) one call
    executes; ``sectors_each``, the 32-byte sectors each one touches (at a step where all 32 lanes
    add)."""
    answers, verdict = read_numbers(((redg_count, "redg_count"), (sectors_each, "sectors_each")),
                                    "of {name} with your answer (a number or an expression)",
                                    whole=True)
    if verdict is not None:
        return verdict
    got_count, got_sectors = answers
    N, C = int(N), int(C)
    want_count = N * -(-C // WARP)  # each row: one instruction a step, the last step partial
    want_sectors = WARP * 4 // 32  # 32 neighbouring floats
    problems = []
    if got_count != want_count:
        problems.append(
            {N * C: f"redg_count = {got_count:,} counts the adds; one REDG carries the adds of a "
                    "warp's 32 lanes",
             N: "redg_count: a row takes more than one, one REDG per step of its lanes' loop",
             N * C // WARP // 8: "redg_count: count per warp, not per block"}.get(
                got_count, f"redg_count = {got_count:,}: how many steps does a row's warp take, "
                           "and how many rows are there?"))
    if got_sectors != want_sectors:
        problems.append(
            {32: "sectors_each = 32 is v1's pattern, a sector per lane; here the 32 lanes' "
                 "addresses are neighbours",
             1: "sectors_each = 1: 32 floats are 128 bytes, more than one 32-byte sector",
             128: "sectors_each: 128 is bytes; a sector is 32 of them"}.get(
                got_sectors, f"sectors_each = {got_sectors}: 32 lanes x 4 bytes, in sectors of "
                             "32 bytes"))
    if problems:
        return failed("; ".join(problems))
    return passed(f"{want_count:,} REDG, each of 32 neighbouring floats, {want_sectors} sectors. "
                  f"v1 at this shape executes as many atomic instructions, but its 32 lanes all "
                  "add to one address: 32 adds queued on one sector")
