"""Lesson 12 (optional, v7 on Hopper): the end-of-lesson questions on rows staged in shared memory
and rows split over a thread-block cluster."""
from __future__ import annotations

from ..core import ladder
from ..course.verdict import Verdict, choice_verdict, failed, passed, read_number


def check_rank_chunks(answer) -> Verdict:
    """At C = 40960 v7 splits each row over a cluster of 4 blocks: how many 16-byte chunks of the
    row does each block own?"""
    got, verdict = read_number(answer, "with a number of chunks", whole=True)
    if verdict is not None:
        return verdict
    w = ladder.v7_fast.wide_layout(40960)
    if got == w.per_rank:
        return passed(f"{w.per_rank}: 40960 channels are 5120 chunks of 8, split over "
                      f"{w.cluster} blocks")
    if got == 40960 // w.cluster:
        return failed("that counts channels: a chunk is 8 bf16 channels (16 bytes)")
    if got == 40960 // 8:
        return failed("that is the whole row: the cluster's blocks each own a part")
    return failed("C / 8 chunks a row, shared among the cluster's blocks")


def check_cluster_wait(answer) -> Verdict:
    """Blocks of one cluster may wait for each other at a cluster barrier, while blocks of a normal
    launch must not. Why?

    a) the hardware starts a cluster's blocks together, so the ones waited for are resident;
    b) a cluster's blocks run on one SM, one after another;
    c) a cluster barrier gives up after a time limit.
    """
    return choice_verdict(
        answer, "a", why="a cluster is co-scheduled: all its blocks are resident at once, so a "
                         "barrier among them waits only for blocks that are running",
        why_not={"b": "a cluster spreads its blocks over several SMs of one GPC; think about "
                      "when they start",
                 "c": "no barrier gives up: it is about whether the blocks waited for are "
                      "running"})


def check_staged_wait(answer) -> Verdict:
    """The staged rows wait for their copies with ``cp.async.wait_group``, with no mbarrier and no
    barrier between warps. Why is that enough?

    a) cp.async is synchronous: the copy has landed when the instruction returns;
    b) each thread later reads only the chunks it copied itself, and wait_group waits for this
       thread's own copies;
    c) shared memory orders every access of a block by itself.
    """
    return choice_verdict(
        answer, "b", why="what a thread waits for is exactly what it reads: no other thread's "
                         "copy is involved, so no barrier is needed",
        why_not={"a": "cp.async is asynchronous (hence wait_group): why does waiting for this "
                      "thread's own copies suffice?",
                 "c": "shared memory does not order threads: who reads the chunks a thread "
                      "copied?"})
