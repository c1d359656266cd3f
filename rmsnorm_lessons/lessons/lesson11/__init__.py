"""Lesson 11 (tuning v7): what the partials add to a call's bytes (section 0), the end-of-lesson
questions, and the pictures of the fixed cost (:mod:`.plots`). The tuning exercise, a search, is
:mod:`rmsnorm_lessons.lessons.lesson11.tuning`.

Questions 1-3 are about v7_fast's register path on the H200 (132 SMs, one block of 512 threads an
SM), the plan lesson 10 reads; the partials and question 4 follow v7_fast's plan on this GPU as the
build targets it, else the H200's saved facts
(:func:`rmsnorm_lessons.core.gpu.target_facts_or_fallback`).
"""
from __future__ import annotations

from ...core import gpu, ladder
from ...course.verdict import Verdict, choice_verdict, failed, passed, read_number
from .plots import fixed_cost, floor_and_fixed  # noqa: F401


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


def tail_rows(N: int, C: int, device=None) -> int:
    """Rows in the last round of the register path's plan at (N, C) (as many as there are row
    groups when every round is full)."""
    r = ladder.v7_fast.resolve(N, C, device or gpu.H200)
    groups = r.grid * r.layout.groups
    return N - (-(-N // groups) - 1) * groups


def check_tail_rows(answer) -> Verdict:
    """At 4096 x 4096 in accumulate mode on the H200 (register path: 2 row groups a block, 132
    blocks): how many rows does the last, partial round hold?"""
    got, verdict = read_number(answer, "with a number of rows", whole=True)
    if verdict is not None:
        return verdict
    want = tail_rows(4096, 4096)
    groups = 2 * 132
    if got == want:
        return passed(f"{want}: 264 row groups take 15 full rounds (3960 rows), and the last "
                      f"{want} rows run with nearly half the row groups idle")
    if got == 4096 % 132:
        return failed("rows are dealt to row groups, not blocks: each block holds 2 of them")
    if got == groups - want:
        return failed("that is how many row groups sit idle in the last round: the question asks "
                      "for the rows it holds")
    return failed("deal N rows round-robin over grid x groups row groups: what is left after the "
                  "full rounds?")


def check_in_flight_bytes(answer) -> Verdict:
    """Overwrite mode, K = 4, one block of 512 threads an SM: how many bytes of dout and inp does
    an SM have in flight once every thread has issued its row's loads?"""
    got, verdict = read_number(answer, "with a number of bytes", whole=True)
    if verdict is not None:
        return verdict
    want = 512 * 4 * 2 * 16
    if got == want:
        return passed(f"{want} bytes (64 KiB): 512 threads x 4 chunks x 2 tensors x 16 bytes, the "
                      f"bytes in flight lesson 09's Little's law asks of each SM")
    if got == want // 2:
        return failed("count both tensors: a thread loads K chunks of dout and K of inp")
    if got == want * 3 // 2:
        return failed("overwrite mode does not read dinp: only dout and inp are loaded")
    if got == want // 16:
        return failed("that counts chunks: each chunk is 16 bytes")
    return failed("threads x K chunks x tensors read x 16 bytes a chunk")


def check_more_sms(answer) -> Verdict:
    """A GPU with twice the H200's SMs and the same DRAM bandwidth runs v7 at 1024 x 4096 (one block
    an SM). The partials' share of the call's bytes:

    a) halves; b) stays the same; c) doubles.
    """
    return choice_verdict(
        answer, "c", why="twice the blocks each write C partials and the final sum reads them "
                         "all, while the rows' bytes stay the same: at few rows a block, more "
                         "SMs cost",
        why_not={"a": "more SMs share the rows, but each block still writes C partials of its "
                      "own",
                 "b": "the rows' bytes stay the same, but what does each block of the grid "
                      "write for the final sum, and how many blocks are there?"})


def reduce_rows(N: int = 16384, C: int = 4096, device=None) -> tuple[int, int, int]:
    """``(rows warp 0 adds, partial rows, warps)`` of a reduce_dweight_v7 block in v7_fast's plan at
    (N, C) on ``device`` (default: this GPU as the build targets it, else the H200's saved facts):
    warp w adds rows w, w + warps, ... below ``parts``."""
    device = device or gpu.target_facts_or_fallback()[0]
    reduce = ladder.plan("v7_fast", N, C, device)[-1]
    parts, warps = dict(reduce.args)["parts"], reduce.block // 32
    return -(-parts // warps), parts, warps


def check_reduce_rows(answer, device=None) -> Verdict:
    """Q4: at 16384 x 4096 on this GPU (v7_fast's plan as it runs here), how many partial rows
    does warp 0 of each reduce_dweight_v7 block add?"""
    got, verdict = read_number(answer, "with a number of partial rows", whole=True)
    if verdict is not None:
        return verdict
    want, parts, warps = reduce_rows(device=device)
    if got == want:
        return passed(f"{want}: the main kernel's {parts} blocks write {parts} partial rows; a "
                      f"block of the final sum has {warps} warps, and warp w adds rows w, "
                      f"w + {warps}, ... below {parts}")
    if got == parts:
        return failed("that is every partial row: the block's warps share them, each taking every "
                      f"{warps}th")
    if got == parts // warps:
        return failed("round up: warp 0 takes row 0 and one row in every further round, the last "
                      "round included")
    if got == warps:
        return failed("that is the warps of a block: how many rows does each of them take?")
    return failed("the partial rows are the main kernel's blocks (the plan's grid); a block of "
                  "the final sum deals them to its warps round-robin")
