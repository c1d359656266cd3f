"""Lesson 10 (v7: one pass over each row): what the partials add to a call's bytes, v7's row pass,
and the end-of-lesson questions (a row group's size, the chunk slots past a row's end, why the final
sum is a second kernel).

The grid defaults to v7_fast's plan on this GPU as the build targets it; where there is no GPU, on
the H200's saved facts (:func:`rmsnorm_lessons.core.gpu.target_facts_or_fallback`). The floor time
of a shape is lesson 09's (:mod:`rmsnorm_lessons.lessons.lesson09`).
"""
from __future__ import annotations

import matplotlib
import numpy as np

from ..core import ladder
from ..core.ladder import v7_fast
from ..course.plots import FIGSIZE, _outside_pyplot
from ..course.verdict import Verdict, choice_verdict, failed, passed, read_number
from ..inspection import access
from .lesson09 import kernel_part  # noqa: F401  (lesson 10 prints v7_fast.cu a part at a time)


def bytes_moved(N: int, C: int, overwrite: bool = False) -> int:
    """What v7_fast must move in one call (:meth:`rmsnorm_lessons.core.ladder.Rung.bytes_moved`)."""
    return ladder.get("v7_fast").bytes_moved(N, C, overwrite)


def _close(got: float, want: float, rel: float = 0.01) -> bool:
    return abs(got - want) <= rel * abs(want)


def partials_fraction(N: int, C: int, grid: int) -> float:
    """Extra traffic of the partials (written once, read once, fp32) over the accumulate-mode
    bytes."""
    return 2 * grid * C * 4 / bytes_moved(N, C)


def check_partials_fraction(answer, N: int = 4096, C: int = 16384,
                            grid: int | None = None) -> Verdict:
    """``answer``: the partials' traffic as a fraction of the kernel's bytes (e.g. 0.05 for 5 %),
    for a grid of ``grid`` blocks (default: what v7_fast's plan launches at (N, C) on this GPU, else
    on the H200)."""
    got, verdict = read_number(answer, "with a fraction, e.g. 0.05 for 5 %")
    if verdict is not None:
        return verdict
    if grid is None:
        grid = ladder.plan("v7_fast", N, C)[0].grid
    want = partials_fraction(N, C, grid)
    if _close(got, want, 0.03):
        return passed(f"{100 * want:.2f} %: {grid} blocks x {C} floats, written and read back, "
                      f"against {bytes_moved(N, C) / 1e6:.0f} MB. It grows as grid / N: fewer rows "
                      f"per block, more partials per row")
    if _close(got, 100 * want, 0.03):
        return failed("that is a percentage: give the fraction (divide by 100)")
    if _close(got, want / 2, 0.03):
        return failed("half of it: the partials are fp32 (4 bytes each) and move twice, written by "
                      "every block and read back by the final sum")
    if _close(got, 2 * want, 0.03):
        return failed("twice too much: the partials move once each way, and the kernel's row "
                      "tensors are bf16 (2 bytes a value)")
    return failed(f"{got:g} is off: partial bytes = 2 * grid * C * 4; the kernel's bytes = 4 * N * "
                  f"C * 2 + 4 * N + 3 * C * 2")


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
    return failed("a row group holds a whole row: G * K * 8 >= C, with G a multiple of 32")


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


def check_final_sum(answer) -> Verdict:
    """Why is v7's final sum a second kernel instead of the last blocks waiting for the others?

    a) a second launch costs less than any wait inside a kernel;
    b) a block must not wait for another block of the same launch, which may not be resident;
       stream order starts the second kernel after every block of the first has finished;
    c) without a second kernel the sums of dweight could not be taken in a fixed order.
    """
    return choice_verdict(
        answer, "b", why="nothing promises that all blocks of a normal launch run at once: a "
                         "block that spins on the others can hold the SM one of them needs",
        why_not={"a": "the cost is not the reason: think about what happens when some blocks of "
                      "the grid cannot get an SM while others wait for them",
                 "c": "determinism only needs a fixed order of every sum, which one kernel could "
                      "keep too: the reason is about which blocks are running at the same "
                      "time"})


# --- the kernel exercise: v7's row pass
# ---------------------------------------------------------------

#: where v7's own row_pass starts in kernels/v7_fast.cu (its template line and signature)
ROW_PASS_START = ("template <int K, bool WEIGHT_IN_REGISTERS>\n__device__ __forceinline__ float "
                  "row_pass(")
V7_FILE = "v7_fast.cu"


def v7_around_row_pass() -> tuple[str, str, int]:
    """kernels/v7_fast.cu cut around its ``row_pass``: the text before it, the text after it, and
    the line of v7_fast.cu the text after it starts at."""
    from ..core import build

    source = build.kernel_source("v7_fast")
    start = source.index(ROW_PASS_START)
    end = source.index("\n}\n", start) + len("\n}\n")
    return source[:start], source[end:], source[:end].count("\n") + 1


def splice_row_pass(text: str) -> str:
    """v7_fast.cu with ``text`` (the learner's row_pass, ``#line 1`` in front) in place of its own
    row_pass.
    ``#line`` directives keep nvcc's line numbers those of v7_fast.cu before and after it."""
    before, after, line = v7_around_row_pass()
    return f'#line 1 "{V7_FILE}"\n{before}{text}\n#line {line} "{V7_FILE}"\n{after}'


def _at_most_v7(prefix: str, what: str, hint: str, kernel: str = "rmsnorm_backward_v7"):
    """A static check: the learner's v7 has no more ``prefix`` instructions than v7_fast itself
    (row_pass needs none of them: v7's own come from the other steps)."""
    from ..course.checking import kernel as kc
    from ..inspection import sass

    def test(c):
        mine = len(kc._matching(c.instructions(kernel), prefix))
        theirs = len(kc._matching(sass.listing("v7_fast",
                                               c.listing.arch).functions[kernel].instructions,
                                  prefix))
        if mine <= theirs:
            return None
        return f"{hint} (the SASS of {kernel} has {mine} {kc._name(prefix)}, v7_fast's {theirs})"

    return kc.Static(what, test)


def _reads_weight4():
    """A source check: the body uses ``weight4`` (the signature names it once). Where the plan
    prefetches, WEIGHT_IN_REGISTERS is false and w[j] holds zeros: weight must come from memory. On
    the GPU the slip is hard to see, since the dot product's term in dinp is small beside bf16's
    tolerance at random data."""
    import re

    from ..course.checking import kernel as kc

    def test(c):
        if len(re.findall(r"\bweight4\b", c.text)) >= 2:
            return None
        return ("weight is in w[j] only when WEIGHT_IN_REGISTERS is true; where the plan "
                "prefetches (accumulate mode, C = 1024..8192) w[j] holds zeros and row_pass loads "
                "weight's chunk itself: if (!WEIGHT_IN_REGISTERS) wj = __ldg(weight4 + chunk); "
                "(your text uses weight4 only in the signature)")

    return kc.Static("weight loaded from weight4 where it is not in registers", test, sass=False)


def check_v7_kernel(source: str, sanitize: bool = True) -> Verdict:
    """Lesson 10's kernel exercise: the learner's ``row_pass`` (pass 1 over a row held in registers:
    this thread's part of the dot product, and dweight's sums in its own slice of shared memory),
    spliced into kernels/v7_fast.cu in place of v7's own, checked as the rung ``yours_v7`` with
    v7_fast's plan and defines, and timed beside v7_fast's own register path (the staged rows would
    not run row_pass).
    compute-sanitizer's race check runs by default; ``sanitize=False`` skips it, for speed."""
    from ..core import ladder
    from ..course.checking import kernel as kc

    if isinstance(source, str) and "row_pass" not in kc.strip_comments(source):
        return failed("keep the function row_pass (its template line and signature, as given): the "
                      "rest of v7 calls it")
    kernel = "rmsnorm_backward_v7"
    v7 = ladder.v7_fast

    # where row_pass runs, at every C
    def register_path(N, C, device, *, block, overwrite=False, config=None):
        return v7.plan(N, C, device, block=block, overwrite=overwrite, config=config
                       or v7.Config(staged=False))

    return kc.check_kernel(
        source, name="yours_v7", like="v7_fast", kernels=(kernel, "reduce_dweight_v7"),
                           plan=register_path,
        compare_config=v7.Config(staged=False), compare_label="v7_fast's register path",
        rows_per_block=1,  # v7 deals rows round-robin: row % grid is the block that took it
        sanitize_it=sanitize, embed=splice_row_pass,
        hints={"dweight unchanged": "Your row pass never stores the sums: write sum[0..3] back to "
                                    "sums(p, 0, chunk) and sum[4..7] to sums(p, 1, chunk) (only "
                                    "where chunk < p.chunks)",
               "dweight wrong": "dweight comes from the sums alone (the rest of v7 is given): each "
                                "row must add into what is already there (read sums(p, 0/1, "
                                "chunk), sum[k] += inp * r * dout, write them back), not replace "
                                "it (= where += belongs), and norm is inp * r",
               "dweight nonfinite": "the sums of a chunk past the end of the row (chunk >= "
                                    "p.chunks) belong to no one: read and write sums(...) only "
                                    "where chunk < p.chunks",
               "dinp wrong": "in dinp your part is the dot product (the rest of v7 is given): dot "
                             "sums weight * dout * inp over this thread's 8 K channels; weight is "
                             "w[j] when WEIGHT_IN_REGISTERS, else __ldg(weight4 + chunk) (the "
                             "prefetching shapes, accumulate mode at C = 1024..8192)"},
        static=(_reads_weight4(),
                kc.no_local_memory(kernel),
                _at_most_v7("BAR", "no barrier of its own (as many BAR as v7_fast)",
                            "a barrier in the row pass: the sums are this thread's alone, so "
                            "nothing needs __syncthreads here, and a barrier in the row loop waits "
                            "for row groups that have fewer rows (a hang)"),
                _at_most_v7("SHFL", "no shuffle of its own (as many SHFL as v7_fast)",
                            "row_pass returns this thread's part of the dot product only: "
                            "exchange() sums the lanes and the warps; a warp_reduce_sum here "
                            "counts every part 32 times"),
                kc.sass_lacks("ATOMS", "no shared-memory atomic (no ATOMS)",
                              "no atomicAdd on the sums: no other thread touches this thread's "
                              "slice",
                              kernel=kernel)))


def v7_row_layout(C: int = 2048, K: int | None = None, block: int = 512):
    """Which thread of a row group loads which 16-byte chunk of a row in v7_fast (chunk = t + j *
    G).

    One column per thread of the group, one row per j (the thread's K chunks): each cell shows the
    chunk number, so a warp's 32 threads read 32 neighbouring chunks (512 contiguous bytes) at every
    j.
    """
    shape = v7_fast.row_layout(C, block, K)
    chunks = C // 8
    G, K = shape.group, shape.K
    grid = access.v7_chunks(C, G, K)
    fig, ax = _outside_pyplot((FIGSIZE[0], 0.9 + 0.35 * K))
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="#eeeeee")
    ax.pcolormesh(np.arange(G + 1) - 0.5, np.arange(K + 1) - 0.5, np.ma.masked_invalid(grid),
                  cmap=cmap,
                  vmin=0, vmax=max(chunks - 1, 1), edgecolors="white", linewidth=0.3)
    if G <= 32:
        for j in range(K):
            for t in range(G):
                if np.isfinite(grid[j, t]):
                    ax.text(t, j, f"{int(grid[j, t])}", ha="center", va="center", fontsize=5,
                            color="white")
    for w in range(32, G, 32):
        ax.axvline(w - 0.5, color="black", lw=1)
    ax.set_xlabel(f"thread t of the row group (G = {G}; black lines: warp boundaries)", fontsize=8)
    ax.set_ylabel("j", fontsize=8)
    ax.set_yticks(range(K))
    ax.invert_yaxis()
    ax.tick_params(labelsize=7)
    idle = int(np.isnan(grid).sum())
    ax.set_title(f"C = {C}: {chunks} chunks of 8 bf16, K = {K} per thread, {shape.groups} row "
                 "group(s) per "
                 f"block" + (f", {idle} idle slots" if idle else ""), fontsize=8)
    return fig
