"""Lesson 11 (tuning v7): the end-of-lesson questions. The tuning exercise itself is
:mod:`rmsnorm_lessons.lessons.lesson11.tuning`.

The shapes and the grid are v7_fast's register path on the H200 (132 SMs, one block of 512 threads
an SM), the plan lesson 10 reads.
"""
from __future__ import annotations

from ...core import gpu, ladder
from ...course.verdict import Verdict, choice_verdict, failed, passed, read_number


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
