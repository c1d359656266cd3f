"""Lesson 13 (finding bugs and bottlenecks): the kernel exercise, a fourth bug to find and fix, and
the questions at the lesson's end on reading a profile
(:func:`rmsnorm_lessons.inspection.nsight.reading`).

The learner gets v3_smem with an early ``return`` for warps that have no row: in a block with fewer
rows than warps, those warps leave before the block's ``__syncthreads()`` and its flush, so the
channels they would flush never reach ``dweight``. The check is
:func:`rmsnorm_lessons.course.checking.kernel.check_kernel` with v3_smem's plan, compute-sanitizer's
racecheck and synccheck included where it exists (``sanitize=False`` skips them).
"""
from __future__ import annotations

from ...course.verdict import Verdict, choice_verdict, failed, passed, read_number
from .plots import (  # noqa: F401  (the lesson's pictures)
    ladder_roofline,
    ladder_rows,
    ladder_table,
    profile_bars,
    seed_loop_rows,
)

KERNEL = "rmsnorm_backward_v3"
HINTS = {
    "dweight wrong": "Which threads run the last loop, the block's flush? In a block with fewer "
                     "rows than warps, do all of its threads get there?",
    "dweight blocks": "Each channel of a block must be flushed once, by one thread of the block: "
                      "the flush loop strides by the block's threads, not by a warp's lanes",
}


def check_v3_fix(source: str, sanitize: bool = True) -> Verdict:
    """The learner's fixed ``rmsnorm_backward_v3``, checked as the rung ``yours_v3_fix`` with
    v3_smem's plan, and under compute-sanitizer's racecheck and synccheck
    (``sanitize=False`` skips them, for speed)."""
    from ...course.checking import kernel as kc

    return kc.check_kernel(
        source, name="yours_v3_fix", like="v3_smem", sanitize_it=sanitize,
        hints=HINTS,
        static=(kc.sass_has("BAR",
                            "two barriers (BAR.SYNC): after zeroing, before the block's flush",
                            "keep both __syncthreads: one after zeroing dweight_shared, one before "
                            "the block's flush to dweight (removing a barrier trades this bug for "
                            "a race)", kernel=KERNEL,
                            at_least=2),
                kc.sass_has("ATOMS", "a shared-memory atomic (ATOMS) into dweight_shared",
                            "keep the shared-memory atomicAdd into dweight_shared", kernel=KERNEL),
                kc.no_local_memory(KERNEL)))


# --- the questions at the lesson's end: reading a profile by rl.nsight.reading's rule -------------


def check_reading_first(answer) -> Verdict:
    """Q1: a launch at DRAM 82 % of its peak with 60 % of its stalls on long_scoreboard. What does
    the rule read, and what is left to make it faster?

    a) latency-bound: more loads in flight; b) memory-bound: move fewer bytes; c) latency-bound:
    more resident warps."""
    first_look = ("Which number does the rule look at first, and which side of its line is it on? "
                  "The stall reasons name what warps wait on, not whether DRAM is the limit")
    return choice_verdict(
        answer, "b", why="DRAM decides first: at or above the line DRAM is busy most of the "
                         "launch, and the warps wait on loads because it is; only fewer bytes "
                         "help",
        why_not={"a": first_look, "c": first_look})


def check_dram_percent(percent, moved_MB=120, took_us=40, peak_TBps=4.8) -> Verdict:
    """Q2: the DRAM throughput, in % of peak, of a launch that moves ``moved_MB`` MB (each byte
    once through DRAM) in ``took_us`` us on a GPU whose DRAM peak is ``peak_TBps`` TB/s."""
    got, verdict = read_number(percent, "with the DRAM throughput in % of the peak (a number)")
    if verdict is not None:
        return verdict
    want = 100.0 * (moved_MB * 1e6 / (took_us * 1e-6)) / (peak_TBps * 1e12)
    if abs(got - want) <= 0.5:
        return passed(f"{moved_MB} MB in {took_us} microseconds is {moved_MB / took_us:g} TB/s, "
                      f"{want:g} % of {peak_TBps:g} TB/s")
    if abs(100.0 * got - want) <= 0.5:
        return failed("that is a fraction of the peak: give it in %")
    return failed(f"{got:g} % is not it: bytes over seconds gives the throughput; check the units "
                  "(MB is 1e6 bytes, us is 1e-6 s, TB/s is 1e12 bytes a second)")


def check_next_step(answer) -> Verdict:
    """Q3: a reading "latency-bound: DRAM at 30 % of its peak, warps mostly waiting on
    long_scoreboard (global loads, 80 % of stalls) at 19 % achieved occupancy". Which change does
    it point to first?

    a) store in bf16, to move fewer bytes; b) more loads in flight: more resident warps, or more
    independent loads per warp; c) remove a ``__syncthreads``."""
    return choice_verdict(
        answer, "b", why="DRAM idles while few warps wait on their loads: more loads in flight, "
                         "from more warps or more per warp, is what DRAM is waiting for",
        why_not={"a": "Fewer bytes help a kernel whose DRAM is busy. Is this one's? What are its "
                      "warps waiting on, and how many are there?",
                 "c": "Which stall reason would a barrier show, and is it the one on top here?"})


def check_occupancy_cap(percent, blocks=2, threads=384, warp_slots=64) -> Verdict:
    """Q4: the highest achieved occupancy (%) of a plan that runs ``blocks`` blocks of ``threads``
    threads on each SM, where an SM holds at most ``warp_slots`` warps."""
    got, verdict = read_number(percent, "with the occupancy in % (a number)")
    if verdict is not None:
        return verdict
    warps = blocks * threads // 32
    want = 100.0 * warps / warp_slots
    if abs(got - want) <= 0.2:
        return passed(f"{blocks} x {threads} threads are {warps} warps of {warp_slots}: "
                      f"{want:g} %; achieved occupancy, an average over the launch, can only be "
                      "lower")
    if abs(100.0 * got - want) <= 0.2:
        return failed("that is a fraction: give it in %")
    return failed(f"{got:g} % is not it: count the warps the SM holds at once (a warp is 32 "
                  "threads) and divide by the warps it could hold")
