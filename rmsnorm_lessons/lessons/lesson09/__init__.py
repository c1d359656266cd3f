"""Lesson 09 (bytes in flight): v6 diagnosed, Little's law decided from the lesson's own
measurements, and a kernel that keeps more bytes in flight.

The lesson opens with v6_last_block measured on the learner's GPU (:func:`opening`: its time and
an Nsight Compute profile, without their reading; without a GPU the saved opening) and the
learner's diagnosis of it (:func:`check_diagnosis`). The decision and question 2 read the
lesson's own run (:func:`.inflight.measured`). The kernel exercise (:mod:`.exercise`) is not a
rung: ``y = a * x`` with 128-bit loads, several issued per thread before the first is used.
"""
from __future__ import annotations

import re

from ...course.verdict import Verdict
from . import inflight
from .checks import (  # noqa: F401  (the lesson's checks, as lesson09.check_...)
    FLAT_WITHIN,
    check_in_flight,
    check_in_flight_kib,
    check_threads_for_bandwidth,
    flat_row,
    in_flight_for_copy,
    threads_for,
)
from .exercise import (  # noqa: F401
    CHECK_SIZES,
    KERNEL,
    UNROLL,
    check_scale_kernel,
)
from .plots import bytes_in_flight, memory_levels  # noqa: F401

# --- the opening: v6 measured, then diagnosed
# ----------------------------------------------------------

#: the rung this lesson opens with and its shape: v6 where lesson 08 left it
OPENING = ("v6_last_block", 16384, 2048)
#: the causes v7_fast removes (lesson 10): the one this lesson studies, few bytes in flight, and
#: v6's barriers per chunk; either is a right diagnosis here (walk-through 03-10: "v7 leaves the
#: barriers" contradicted lesson 10)
THIS_LESSON = ("few_loads_in_flight", "barriers")
#: the rung that removes them, as the verdict names it
REMOVED_BY = "lesson 10's v7_fast"
_OPENED: dict = {}


def opening(after: bool = False, *, fresh: bool = False):
    """v6_last_block at 16384 x 2048 (``after``: this lesson's change, ``scale_f128_x4`` at 2 blocks
    of 256 threads an SM on 64 Mi floats, a :class:`~rmsnorm_lessons.inspection.nsight.Probe`): its
    time and Nsight Compute profile (:func:`rmsnorm_lessons.course.investigate.opening`), measured
    now on this GPU, else the saved opening. Kept: a later call returns the same opening
    (``fresh=True`` measures again)."""
    from ...course import investigate

    key = "after" if after else "before"
    if fresh or key not in _OPENED:
        _OPENED[key] = _probe_opening(*CHANGE[1]) if after else investigate.opening(*OPENING)
    return _OPENED[key]


def check_diagnosis(bound=None, cause=None, metric=None, value=None, *, before=None) -> Verdict:
    """The learner's diagnosis of v6 (:func:`rmsnorm_lessons.course.diagnose.check`): ``bound``
    ("memory" or "latency"), ``cause`` (a name of ``rl.diagnose.CAUSES``), ``metric`` (the figure
    that shows it, a name of ``rl.diagnose.METRICS``) and ``value`` (that figure as the opening
    shows it), judged against the opening's own profile (``before``, default :func:`opening`)."""
    from ..diagnosis import judge

    return judge(before if before is not None else opening(), bound=bound, cause=cause,
                 metric=metric, value=value, this_lesson=THIS_LESSON, rung=REMOVED_BY)


# --- the decision's consequence, and what changed
# ------------------------------------------------------


def measured() -> inflight.Run:
    """The lesson's run: the copy bandwidth, SMs, chase and scale table measured in this process,
    else the saved run of the same cells (:func:`.inflight.measured`)."""
    return inflight.measured()


def chase() -> tuple[inflight.Chase, str]:
    """Section 2's pointer chase: ``(latencies, where)``, measured now on this GPU (and kept for
    the table and the decision), else the saved run's, ``where`` saying which card and date. The
    same run as the opening's and the table's: without a GPU every figure of the lesson is the
    saved run's."""
    from ...core import gpu

    if gpu.why_unavailable() is None:
        return inflight.chase(), f"measured now on {gpu.facts().name}"
    run = inflight.saved_run()
    return run.chase, run.source


#: section 4's launches: each variant at these blocks of 256 threads per SM, then lesson 00's
BLOCKS_PER_SM = (1, 2, 4, 8)


def scale_table() -> inflight.Run:
    """Section 4's table: every scale variant at :data:`BLOCKS_PER_SM` and lesson 00's launch,
    timed now on this GPU (with the chase, if this process has not measured it), else the saved
    run; the :class:`.inflight.Run` the decision reads too (:func:`measured`)."""
    from ...core import gpu

    if gpu.why_unavailable() is None:
        copy = gpu.copy_bandwidth()
        for variant in inflight.VARIANTS:
            for blocks in BLOCKS_PER_SM:
                inflight.time_scale(variant, copy, blocks_per_sm=blocks)
        inflight.time_scale(*inflight.LESSON00[:1], copy)
        if inflight.this_run() is None:
            inflight.chase()
    return measured()


def table(run: inflight.Run) -> str:
    """The scale table as section 4 prints it: each row's KiB of loads per SM, time, GB/s, % of
    copy, and Little's law's % of copy at the chase's DRAM latency (the run's own)."""
    lines = [f"{run.source}; copy {run.copy_gbps:.0f} GB/s, {run.sms} SMs",
             f"{'kernel':<14} {'blocks/SM':>9} {'KiB/SM':>7} {'ms':>7} {'GB/s':>6} "
             f"{'% copy':>7} {'Little':>7}"]
    for p in run.points:
        little = inflight.predicted_fraction(p.in_flight_per_sm, run.sms, run.chase.dram_ns,
                                             run.copy_gbps)
        lines.append(f"{p.variant:<14} {p.blocks_per_sm or 'grid':>9} "
                     f"{p.in_flight_per_sm / 1024:>7g} {p.ms:>7.3f} {p.gbps:>6.0f} "
                     f"{100 * p.fraction_of_copy:>6.1f}% {100 * little:>6.1f}%")
    return "\n".join(lines)


def ceiling():
    """Explore's streaming ceiling (``rl.bench.stream_ceiling``) at the large shapes, both modes:
    timed now on this GPU and kept with the lesson's run (:func:`.inflight.save`), else the saved
    run's. Prints where it comes from and the table, and returns ``(rows, copy GB/s)`` for
    ``rl.plots.speed_of_light``; where the saved run did not time it, says so and returns None."""
    from ...core import gpu
    from ...speed import bench

    if gpu.why_unavailable() is None:
        copy = gpu.copy_bandwidth()
        rows = [bench.stream_ceiling(N, C, copy, overwrite=o) for N, C in bench.LARGE_SHAPES
                for o in (False, True)]
        inflight._MEASURED["ceiling"] = rows
        run = inflight.this_run()
        if run is not None:
            inflight.save(run)
        where = f"measured now on {gpu.facts().name}"
    else:
        run = inflight.saved_run()
        rows, where, copy = list(run.ceiling), run.source, run.copy_gbps
        if not rows:
            print(f"The saved run ({where}) did not time the ceiling: the course's next GPU run "
                  "records it, and on a GPU this cell times it.")
            return None
    print(f"{where}:\n{bench.table(rows)}")
    return rows, copy


def in_flight_marked(run: inflight.Run | None = None, *, after=None):
    """The scale table's points against the copy line, with Little's law at the chase's DRAM
    latency, and the decision's two answers marked: the KiB per SM Little's law asks with the
    unloaded latency, and where the table flattens (:func:`.checks.flat_row`). ``after``: the
    decision's verdict; the picture marks the answers only once it passed (else a sentence)."""
    if after is not None and not getattr(after, "passed", False):
        print("The picture marks both answers once your decision passes.")
        return None
    run = run if run is not None else measured()
    need = in_flight_for_copy(run.copy_gbps, run.chase.dram_ns, run.sms) / 1024
    flat = flat_row(run).in_flight_per_sm / 1024
    return bytes_in_flight(run.points, run.chase.dram_ns, run.sms,
                           title=f"bytes in flight per SM ({run.source})",
                           marks={f"Little's law, unloaded: {need:.1f} KiB": need,
                                  f"the table flattens: {flat:g} KiB": flat})


#: what changed in this lesson: lesson 00's scale (one 4-byte load a thread, one thread an
#: element) -> 16-byte loads, four a thread before the first use, at 2 blocks of 256 threads per SM;
#: each a (kernel, blocks per SM...) of a Probe, on 64 Mi floats
CHANGE = (("scale_f32_x1",), ("scale_f128_x4", 2))
CHANGE_SHAPE = (64 * 2**20, 1)


def _probe_opening(kernel: str, *args):
    """One of lesson 09's scale kernels as an opening: its time (:func:`.inflight.time_scale`, the
    lesson's own timing) and its profile, on :data:`CHANGE_SHAPE`."""
    from ...core import gpu
    from ...course import investigate
    from ...inspection.nsight import Probe

    def timing():
        return inflight.time_scale(kernel, gpu.copy_bandwidth(), blocks_per_sm=args[0] if args
                                   else None, n_floats=CHANGE_SHAPE[0] * CHANGE_SHAPE[1])

    return investigate.opening(Probe("lesson09", kernel, *args), *CHANGE_SHAPE, timing=timing)


def what_changed():
    """From lesson 00's ``scale`` to ``scale_f128_x4`` at 2 blocks per SM (:data:`CHANGE`), each
    measured as an opening (its time and its profile; without a GPU the saved run's):
    :func:`rmsnorm_lessons.course.investigate.what_changed` prints the table and draws the
    picture."""
    from ...course import investigate

    if "lesson00" not in _OPENED:
        _OPENED["lesson00"] = _probe_opening(*CHANGE[0])
    return investigate.what_changed(_OPENED["lesson00"], opening(after=True))


# --- a part of a kernel file, to print only what a cell discusses
# ------------------------------------------------------


def _struct(text: str, name: str) -> str | None:
    """``struct name { ... };`` in CUDA source ``text`` with its leading comment lines, or None."""
    m = re.search(r"^((?:[ \t]*//.*\n)*)(?:template\s*<[^>]*>\s*\n)?struct\s+"
                  r"(?:alignas\([^)]*\)\s*)?" + re.escape(name) + r"\s*\{", text, re.M)
    if m is None:
        return None
    depth = 0
    for i in range(m.end() - 1, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[m.start():text.index(";", i) + 1]
    return None


def kernel_part(source: str, part: str) -> str:
    """The definition of function, kernel or struct ``part`` in ``source`` (a rung or a file under
    kernels/, as :func:`rmsnorm_lessons.core.build.kernel_source` takes), from its leading comment
    to its end: what a cell prints instead of the whole file. ValueError (listing the functions
    defined there) for a name the file does not define."""
    from ...core import build
    from ...course import notebook

    text = build.kernel_source(source)
    return _struct(text, part) or notebook.part_of(text, part)
