"""Lesson 10 (v7: one pass over each row): v6 at a wider row diagnosed, the row plan decided
(threads a row group, bytes in flight an SM), v7's ``load_row`` and ``row_pass`` written
(:mod:`.exercise`), what changed from v6 to v7's register path, and the end-of-lesson questions (a
row group's size, the chunk slots past a row's end).

The lesson opens with v6_last_block measured on the learner's GPU (:func:`opening`: its time and an
Nsight Compute profile, without their reading; without a GPU the saved opening) and the learner's
diagnosis (:func:`check_diagnosis`). The plan's figures come from v7_fast's plan on this GPU as the
build targets it; where there is no GPU, on the H200's saved facts
(:func:`rmsnorm_lessons.core.gpu.target_facts_or_fallback`).
"""
from __future__ import annotations

from ...core import gpu, ladder
from ...core.ladder import v7_fast
from ...course.verdict import Verdict, failed, passed, read_number
from ..lesson09 import kernel_part  # noqa: F401  (lesson 10 prints v7_fast.cu a part at a time)
from .exercise import STEPS, check_v7_kernel, splice, v7_around_steps  # noqa: F401
from .plots import v7_row_layout  # noqa: F401

# --- the opening: v6 at a wide row, then v7's register path
# -------------------------------------------------------------

#: (rung, N, C, config) of the opening (v6, where lesson 09 left it, at a row twice as wide) and of
#: what changed (v7's register path, the path this lesson writes two steps of)
OPENINGS = {"before": ("v6_last_block", 16384, 4096, None),
            "after": ("v7_fast", 16384, 4096, v7_fast.Config(staged=False))}
#: the causes v7 removes: few bytes in flight per warp, and barriers at every step of a row
THIS_LESSON = ("few_loads_in_flight", "barriers")
_OPENED: dict = {}


def opening(after: bool = False, *, fresh: bool = False):
    """v6_last_block at 16384 x 4096 (``after``: v7_fast's register path at the same shape): its
    time and Nsight Compute profile (:func:`rmsnorm_lessons.course.investigate.opening`), measured
    now on this GPU, else the saved opening. Kept: a later call returns the same opening
    (``fresh=True`` measures again)."""
    from ...course import investigate

    key = "after" if after else "before"
    if fresh or key not in _OPENED:
        version, N, C, config = OPENINGS[key]
        _OPENED[key] = investigate.opening(version, N, C, config=config)
    return _OPENED[key]


def check_diagnosis(bound=None, cause=None, metric=None, value=None, *, before=None) -> Verdict:
    """The learner's diagnosis of v6 at 16384 x 4096
    (:func:`rmsnorm_lessons.course.diagnose.check`, through :func:`..diagnosis.judge`: NOT
    VERIFIED where the saved opening lacks the figure), judged against the opening's own profile
    (``before``, default :func:`opening`)."""
    from ..diagnosis import judge

    return judge(before if before is not None else opening(), bound=bound, cause=cause,
                 metric=metric, value=value, this_lesson=THIS_LESSON, rung="v7_fast")


# --- the decision: the row plan at C = 4096
# --------------------------------------------------------------------

#: the decision's shape (accumulate mode): the opening's
DECISION = (16384, 4096)


def row_plan(N: int = DECISION[0], C: int = DECISION[1], overwrite: bool = False, device=None):
    """``(G, in_flight, resolved)`` of v7_fast's register path at (N, C): threads a row group, and
    bytes of loads an SM has in flight once every thread has issued this row's dout, inp (and dinp,
    accumulating) and, where the plan prefetches, the next row's dout and inp."""
    device = device or gpu.target_facts_or_fallback()[0]
    r = v7_fast.resolve(N, C, device, overwrite=overwrite, config=v7_fast.Config(staged=False))
    s = r.layout
    tensors = (2 if overwrite else 3) + (2 if s.prefetch else 0)
    return s.group, r.per_sm * s.block * s.K * 16 * tensors, r


def _flat_kib() -> tuple[float, str]:
    """Where lesson 09's scale table flattened, and the run it came from."""
    from .. import lesson09

    run = lesson09.measured()
    return lesson09.flat_row(run).in_flight_per_sm / 1024, run.source


def check_row_plan(G, in_flight, *, flat_kib: float | None = None, device=None) -> Verdict:
    """The decision at 16384 x 4096, accumulate mode, on v7's register path: ``G``, the threads of
    a row group; ``in_flight``, the bytes of loads an SM has in flight once every thread has issued
    this row's dout, inp and dinp and the next row's dout and inp. ``flat_kib``: where lesson 09's
    scale table flattened (default: lesson 09's run, measured in this process or saved)."""
    g_got, verdict = read_number(G, "with a number of threads (G)", whole=True)
    if verdict is not None:
        return verdict
    f_got, verdict = read_number(in_flight, "with a number of bytes (in_flight)", whole=True)
    if verdict is not None:
        return verdict
    N, C = DECISION
    want_g, want_f, r = row_plan(N, C, device=device)
    s, threads = r.layout, r.per_sm * r.layout.block
    problems = []
    if g_got != want_g:
        why = {s.block: "that is the whole block: a row group holds one row, G x K x 8 >= C",
               C // s.K: "a thread holds K chunks of 8 channels each, not K channels",
               C // 8: "that is the row's chunks: each thread of the group holds K of them"}
        problems.append(f"G {g_got} is not it: " + why.get(
            g_got, f"a row group holds a whole row: G x K x 8 >= C with K = {s.K}, G a multiple "
                   "of 32"))
    if f_got != want_f:
        chunk = threads * s.K * 16
        why = {chunk * 2: "this row's dinp is loaded too (accumulate mode: dinp +=), and the next "
                          "row's dout and inp",
               chunk * 3: "and the next row's dout and inp, prefetched while this row is finished",
               chunk * 4: "this row's dinp is loaded too (accumulate mode: dinp +=)",
               chunk * 6: "the next row's dinp is not prefetched: only its dout and inp",
               want_f * s.group // threads: "the SM holds the whole block: every row group of it "
                                            "has its rows in flight",
               want_f // 1024: "in_flight is in bytes, not KiB",
               want_f // 16: "a chunk is 16 bytes"}
        problems.append(f"in_flight {f_got} is not it: " + why.get(
            f_got, f"threads an SM x K chunks x 16 bytes x the row tensors loaded (this row's "
                   f"three, the next row's two); the plan runs {threads} threads an SM"))
    if problems:
        return failed("; ".join(problems))
    if flat_kib is None:
        flat_kib, where = _flat_kib()
    else:
        where = "given"
    return passed(f"G = {want_g} threads: {C} channels are {C // 8} chunks of 8, K = {s.K} a "
                  f"thread. In flight: {threads} threads x {s.K} chunks x 16 bytes x (3 tensors "
                  f"of this row + 2 of the next) = {want_f:,} bytes ({want_f / 1024:g} KiB) an SM, "
                  f"{want_f / 1024 / flat_kib:.1f} times the {flat_kib:g} KiB where lesson 09's "
                  f"scale table flattened ({where}): lesson 11 measures whether v7 needs it all")


# --- the end-of-lesson questions
# ---------------------------------------------------------------


def check_group_size(answer) -> Verdict:
    """In overwrite mode at C = 6144, K = 4 chunks a thread: how many threads G hold one row?"""
    got, verdict = read_number(answer, "with a number of threads", whole=True)
    if verdict is not None:
        return verdict
    want = ladder.v7_fast.row_layout(6144, overwrite=True).group  # 6144 / (8 * 4) = 192
    if got == want:
        return passed(f"{want} threads: 6144 channels are 768 chunks of 8, and K = 4 of them a "
                      f"thread; G is a multiple of 32, so six warps make a row group")
    if got == 6144 // 8:
        return failed("that is the row's chunks: each thread of the group holds K of them")
    if got == 6144 // 4:
        return failed("a thread holds K chunks of 8 channels each, not K channels")
    held = got * 4 * 8
    if held < 6144:
        return failed(f"{got} x 4 x 8 = {held} channels, fewer than the row's 6144: a row group "
                      "holds a whole row, G x K x 8 >= C")
    if got % 32:
        return failed(f"{got} threads hold the row, but a row group is whole warps: G is a "
                      "multiple of 32")
    idle = (held - 6144) // (4 * 8)
    return failed(f"{got} x 4 x 8 = {held} channels hold the row's 6144, but {idle} of the "
                  f"{got} threads would hold none of its chunks: the plan takes the fewest whole "
                  "warps whose K chunks a thread cover the row")


def check_idle_slots(answer) -> Verdict:
    """At C = 1600 in accumulate mode (K = 2, G = 128): how many of a row group's G x K chunk
    slots fall past the row's end?"""
    got, verdict = read_number(answer, "with a number of chunk slots", whole=True)
    if verdict is not None:
        return verdict
    s = ladder.v7_fast.row_layout(1600)
    want = s.group * s.K - 1600 // 8
    if got == want:
        return passed(f"{want}: 128 x 2 = 256 slots for 200 chunks. Those threads skip their last "
                      f"chunk's loads and sums (chunk < p.chunks)")
    if got == 1600 // 8:
        return failed("that is the row's chunks (C / 8): subtract them from the slots G x K")
    if got == s.group - 1600 // 16:
        return failed("count both of a thread's chunks: the slots are G x K")
    return failed("a chunk is 8 channels; the group has G x K slots for the row's C / 8 chunks")
