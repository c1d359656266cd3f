"""The course's lessons, one row each: the only list of them.

Tests, the student edition, ``progress``, the site, the README's lesson table and the lab's
scripts read this registry; a new lesson is one :class:`Lesson` row here (and its notebook).

    >>> from rmsnorm_lessons import lessons
    >>> [l.stem for l in lessons.LESSONS][:3]
    ['00_setup', '01_rmsnorm_math', '02_naive']
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["LESSONS", "Lesson", "NEEDS", "SESSIONS", "building", "by_stem", "kernel_exercises",
           "notebook_dir"]

#: when a lesson is taken: before the workshop's first day, in it, or after it (at the learner's
#: pace); :mod:`rmsnorm_lessons.course.schedule` plans the workshop lessons over two days
SESSIONS = ("prework", "workshop", "optional")
#: what a lesson may need of the machine: a working GPU (PyCUDA on a driver), nvcc, and the CUDA
#: tools Nsight Compute (ncu), compute-sanitizer and nvdisasm; the set-up cell's doctor
#: (:mod:`rmsnorm_lessons.course.doctor`) says what a lesson does without each
NEEDS = ("gpu", "nvcc", "ncu", "compute-sanitizer", "nvdisasm")
#: a lesson that launches and compiles kernels
BASIC = ("gpu", "nvcc")
#: one whose kernel exercise is checked with compute-sanitizer (racecheck, synccheck, memcheck)
#: and in its SASS (nvdisasm); PROFILED adds Nsight Compute's profile of a rung
KERNEL = BASIC + ("compute-sanitizer", "nvdisasm")
PROFILED = KERNEL + ("ncu",)


@dataclass(frozen=True)
class Lesson:
    """One lesson: its notebook, what it builds and its exercises.

    ``exercises`` name the checks the notebook calls, in the order it calls them, as
    ``"lessonNN.check_x"`` (the module in :mod:`rmsnorm_lessons.course.verdict` and the function);
    ``kernel_exercise`` is the one among them that judges a CUDA kernel the learner writes, if any.
    ``minutes`` is a sitting: for 03-10, the latest walk-through's minutes for a new learner who
    writes the exercises (results/walkthrough-2026-12-06: the third for 03, 05, 06 and 10, the
    second, less what round 3 moved to Explore, for the others); for the others the lesson's own
    estimate; ``kernel`` is what the README's table
    shows in its kernel column (the rung's name, or the other kernels the lesson builds).
    ``prerequisites`` are the stems of the earlier lessons whose code or ideas this one uses
    directly (the rest follow through theirs); :mod:`rmsnorm_lessons.course.schedule` plans a
    two-day workshop from them and the minutes, and refuses a lesson placed before one it needs.
    ``session`` is when the lesson is taken (:data:`SESSIONS`): ``"prework"`` before day 1 (the
    plan counts it as done), ``"workshop"`` on one of the two days, ``"optional"`` after them.
    ``needs`` names what of :data:`NEEDS` the lesson uses (tests/test_doctor.py finds each use
    in its notebook: a ``%%gpu`` cell, a profile, a kernel exercise, a SASS listing).
    """

    stem: str
    title: str
    kernel: str
    adds: str
    exercises: tuple[str, ...]
    minutes: int
    rung: str | None = None
    kernel_exercise: str | None = None
    prerequisites: tuple[str, ...] = ()
    needs: tuple[str, ...] = BASIC
    session: str = "workshop"

    def __post_init__(self):
        if self.session not in SESSIONS:
            raise ValueError(f"lesson {self.stem}: session must be one of {', '.join(SESSIONS)}, "
                             f"not {self.session!r}")

    @property
    def number(self) -> str:
        return self.stem[:2]

    @property
    def notebook(self) -> str:
        return f"{self.stem}.ipynb"

    @property
    def path(self) -> Path:
        """The instructor edition's notebook in this checkout (or installed copy)."""
        return notebook_dir() / self.notebook


LESSONS: tuple[Lesson, ...] = (
    Lesson("00_setup", "Setup: a first kernel and the copy bandwidth", "-",
           "what is here, a first `SourceModule` kernel, CUDA events, the copy bandwidth",
           ("lesson00.check_grid", "lesson00.check_bytes", "lesson00.check_ridge",
            "lesson00.check_more_flops", "lesson00.check_rotate_sets"), minutes=60,
           prerequisites=(), session="prework"),
    Lesson("01_rmsnorm_math", "The math of RMSNorm", "`rmsnorm_forward`",
           "forward and backward derived, the NumPy reference, finite differences",
           ("lesson01.check_term2", "lesson01.check_rstd_scaling",
            "lesson01.check_overwrite_fraction", "lesson01.check_fd_passes"), minutes=55,
           prerequisites=(), session="prework"),
    Lesson("02_naive", "v1: one thread per row", "`v1_naive`",
           "one thread per row, two loops over C, dweight by global `atomicAdd`; the first "
           "profile, read by one rule",
           ("lesson02.check_atomics", "lesson02.check_sectors", "lesson02.check_v1_kernel",
            "lesson02.check_diagnosis", "lesson02.check_idle_sms", "lesson02.check_coalesce_v1",
            "lesson02.check_free_atomics"),
           minutes=74, rung="v1_naive", kernel_exercise="lesson02.check_v1_kernel",
           prerequisites=("00_setup", "01_rmsnorm_math"),
           needs=PROFILED),
    Lesson("03_warp_per_row", "v2: one warp per row", "`v2_warp`",
           "v1 diagnosed; one warp per row: coalesced loads, the `__shfl_xor_sync` butterfly",
           ("lesson03.check_diagnosis", "lesson03.check_butterfly", "lesson03.check_v2_kernel",
            "lesson03.check_v2_redg", "lesson03.check_lane_columns", "lesson03.check_small_n"),
           minutes=79, rung="v2_warp", kernel_exercise="lesson03.check_v2_kernel",
           prerequisites=("02_naive",),
           needs=PROFILED),
    Lesson("04_shared_memory", "v3: dweight in shared memory", "`v3_smem`",
           "v2 diagnosed with ablations; dweight per block in shared memory, one global atomic "
           "per block and channel",
           ("lesson04.check_diagnosis", "lesson04.check_dweight_home", "lesson04.check_v3_kernel",
            "lesson04.check_two_row_warps", "lesson04.check_v3_occupancy_cap",
            "lesson04.check_widest_c"),
           minutes=75, rung="v3_smem", kernel_exercise="lesson04.check_v3_kernel",
           prerequisites=("03_warp_per_row",),
           needs=PROFILED),
    Lesson("05_bf16", "bf16 storage and 128-bit loads: v4, a first draft",
           "`v4`, a first draft",
           "v3 measured and diagnosed; bf16; what a lane loads with 128 bits; v4's first draft "
           "written from its signature and measured against v3",
           ("lesson05.check_diagnosis", "lesson05.check_v4_layout", "lesson05.check_v4_draft",
            "lesson05.check_sum_stalls", "lesson05.check_range", "lesson05.check_bf16_round",
            "lesson05.check_half_ulp"),
           minutes=81, kernel_exercise="lesson05.check_v4_draft",
           prerequisites=("04_shared_memory",),
           needs=PROFILED),
    Lesson("06_vectorized", "v4 as the seed has it: its staging and cache hints",
           "`v4_vec_bf16`",
           "the draft's bank conflicts diagnosed, a conflict-free slot decided, the draft's second "
           "loop rewritten with it and with cache hints, read in the SASS",
           ("lesson06.check_diagnosis", "lesson06.check_slot", "lesson06.check_v4_kernel",
            "lesson06.check_planar_slot", "lesson06.check_four_wide_conflict",
            "lesson06.check_streaming_store", "lesson06.check_tolerance_n"),
           minutes=73, rung="v4_vec_bf16", kernel_exercise="lesson06.check_v4_kernel",
           prerequisites=("05_bf16",),
           needs=PROFILED),
    Lesson("07_two_pass", "v5: the same bits on every run", "`v5_two_pass`",
           "v4's varying dweight measured; what a fixed order costs (scratch, barriers, "
           "occupancy); per-block partials and a second kernel that sums them",
           ("lesson07.check_diagnosis", "lesson07.check_scratch_bytes",
            "lesson07.check_staging_barriers", "lesson07.check_v5_occupancy",
            "lesson07.check_v5_kernel", "lesson07.check_same_bits", "lesson07.check_second_wave",
            "lesson07.check_launch_bound_registers"),
           minutes=74, rung="v5_two_pass", kernel_exercise="lesson07.check_v5_kernel",
           prerequisites=("06_vectorized",),
           needs=PROFILED),
    Lesson("08_last_block", "v6, the seed's kernel10: one launch", "`v6_last_block`",
           "v5's second launch measured; where a grid-wide reduction needs fences; the last "
           "block's fences and its `atomicInc` ticket written into v6",
           ("lesson08.check_diagnosis", "lesson08.check_fences", "lesson08.check_v6_kernel",
            "lesson08.check_membar_count", "lesson08.check_partial_floats",
            "lesson08.check_second_wave", "lesson08.check_atomic_inc",
            "lesson08.check_seed_tickets"),
           minutes=74, rung="v6_last_block", kernel_exercise="lesson08.check_v6_kernel",
           prerequisites=("07_two_pass",),
           needs=PROFILED),
    Lesson("09_bytes_in_flight", "Bytes in flight: why v6 waits, and how much is enough",
           "(copy, `scale`, the streaming ceiling)",
           "v6 diagnosed from its profile; Little's law: latency x bandwidth, the bytes in flight "
           "a measurement asks, vector width, unrolling, the floor of a memory-bound kernel",
           ("lesson09.check_diagnosis", "lesson09.check_in_flight", "lesson09.check_scale_kernel",
            "lesson09.check_in_flight_kib", "lesson09.check_threads_for_bandwidth"),
           minutes=72, kernel_exercise="lesson09.check_scale_kernel",
           prerequisites=("00_setup", "06_vectorized", "08_last_block"),
           needs=PROFILED),
    Lesson("10_v7_one_pass", "v7: one pass over each row", "`v7_fast`",
           "past the seed: v6 diagnosed at a wide row, the row plan decided from the registers, "
           "a row's loads all issued before its one pass, no barrier per step",
           ("lesson10.check_diagnosis", "lesson10.check_row_plan", "lesson10.check_v7_kernel",
            "lesson10.check_group_size", "lesson10.check_idle_slots"),
           minutes=77, rung="v7_fast", kernel_exercise="lesson10.check_v7_kernel",
           prerequisites=("08_last_block", "09_bytes_in_flight"),
           needs=PROFILED),
    Lesson("11_v7_tuning", "Tuning v7: each choice measured, then a search",
           "(`v7_fast`'s variants, the peers)",
           "the final sum and a launch's fixed cost; K, prefetch, blocks per SM and overwrite mode "
           "predicted then measured, the scoreboard, the libraries, a search for your GPU",
           ("lesson11.check_partials_fraction", "tuning.check_tuning", "lesson11.check_tail_rows",
            "lesson11.check_in_flight_bytes", "lesson11.check_more_sms",
            "lesson11.check_reduce_rows"), minutes=72, prerequisites=("10_v7_one_pass",)),
    Lesson("12_v7_hopper", "Optional: v7 on Hopper, rows in shared memory and across a cluster",
           "(`v7_fast`'s staged and wide paths)",
           "rows staged in shared memory by `cp.async`, rows split over a thread-block cluster "
           "(bulk copies, mbarriers, distributed shared memory)",
           ("lesson12.check_rank_chunks", "lesson12.check_waiting_clusters",
            "lesson12.check_staged_ring"), minutes=35, prerequisites=("11_v7_tuning",),
           session="optional"),
    Lesson("13_finding_bugs", "Finding bugs and bottlenecks",
           "(three broken rungs, the seed's row loop)",
           "compute-sanitizer's racecheck, synccheck and memcheck; what the seed gets wrong; "
           "its row loop made uniform; Nsight Compute's DRAM peak and occupancy; the ladder on "
           "one roofline",
           ("lesson13.check_wrap_row", "lesson13.check_seed_loop", "lesson13.check_dram_peak",
            "lesson13.check_dram_percent", "lesson13.check_blocks_for_occupancy",
            "lesson13.check_occupancy_cap"), minutes=72,
           kernel_exercise="lesson13.check_seed_loop",
           prerequisites=("04_shared_memory", "07_two_pass", "08_last_block",
                          "10_v7_one_pass"), session="optional",
           needs=PROFILED),
)

_BY_STEM = {lesson.stem: lesson for lesson in LESSONS}


def by_stem(stem: str) -> Lesson:
    """The lesson whose notebook is ``stem`` (``"04_shared_memory"``; ``.ipynb`` is dropped)."""
    key = stem[:-len(".ipynb")] if stem.endswith(".ipynb") else stem
    try:
        return _BY_STEM[key]
    except KeyError:
        raise ValueError(f"no lesson {stem!r}; the lessons are {', '.join(_BY_STEM)}") from None


def building(rung: str) -> Lesson | None:
    """The lesson that builds the rung named ``rung`` (None: no lesson does)."""
    return next((lesson for lesson in LESSONS if lesson.rung == rung), None)


def kernel_exercises() -> tuple[Lesson, ...]:
    """The lessons that ask the learner to write a CUDA kernel, in course order."""
    return tuple(lesson for lesson in LESSONS if lesson.kernel_exercise)


def notebook_dir() -> Path:
    """Where the instructor edition's notebooks are: the checkout's notebooks folder beside the
    package, else the copy an installed package carries inside itself."""
    here = Path(__file__).resolve().parents[1]  # the package
    for candidate in (here.parent / "notebooks", here / "notebooks"):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError("the lessons' notebooks are neither beside the package nor inside it")
