"""Lesson 12 (optional, v7 on Hopper): the end-of-lesson questions on rows staged in shared memory
and rows split over a thread-block cluster. The clusters and the staged rows follow this GPU's
facts, else the H200's saved ones (:func:`rmsnorm_lessons.core.gpu.facts_or_fallback`)."""
from __future__ import annotations

from ..core import gpu, ladder
from ..course.verdict import Verdict, failed, passed, read_number


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


def clusters_waiting(C: int = 65536, device=None) -> tuple[int, int, int]:
    """``(waiting, filling, resident)`` for rows split over clusters at ``C``: a grid of clusters
    filling every SM (``ceil(SMs / cluster size)``), how many of them the driver says run at once
    on ``device`` (default: this GPU, else the H200's saved facts), and how many wait for a second
    round."""
    device = device or gpu.facts_or_fallback()[0]
    size = ladder.v7_fast.wide_layout(C).cluster
    resident = dict(device.resident_clusters).get(size)
    if resident is None:
        raise ValueError(f"{device.name} ({device.arch}) runs no clusters of {size}: clusters need "
                         "sm_90 or newer")
    filling = -(-device.multiprocessors // size)
    return max(0, filling - resident), filling, resident


def check_waiting_clusters(answer, device=None) -> Verdict:
    """Q2: at 2048 x 65536 (clusters of 4), a grid of clusters that fills every SM: how many of
    them wait for a second round, by the driver's count of clusters resident at once (printed in
    section 2)? ``device``: this GPU, else the H200's saved facts."""
    got, verdict = read_number(answer, "with a number of clusters", whole=True)
    if verdict is not None:
        return verdict
    device = device or gpu.facts_or_fallback()[0]
    if device.compute_capability < (9, 0):  # the question is about an sm_90 GPU: the H200's facts
        device = gpu.H200
    waiting, filling, resident = clusters_waiting(device=device)
    if got == waiting:
        return passed(f"{waiting}: {device.multiprocessors} SMs / 4 = {filling} clusters fill the "
                      f"GPU, but {device.name} runs {resident} of them at once: the last {waiting} "
                      "wait, with most of the GPU idle (the plan launches only what runs at once)")
    if got == 0:
        return failed("that assumes every SM can hold a block of a cluster: the driver's figure "
                      "says how many clusters run at once, not SMs / 4")
    if got == filling:
        return failed("that is the grid that fills the GPU: how many of its clusters run at once, "
                      "and how many are left?")
    if got == resident:
        return failed("that many run in the first round: how many are left for a second?")
    return failed("clusters that fill the GPU (SMs / cluster size, rounded up) minus the clusters "
                  "the driver says are resident at once")


def staged_ring(C: int = 4096, device=None):
    """``(ring bytes, rows in flight, layout)`` of one staged row group at ``C`` in overwrite mode
    on ``device`` (default: this GPU, else the H200's saved facts; the H200's where this GPU has no
    cp.async)."""
    device = device or gpu.facts_or_fallback()[0]
    block = ladder.get("v7_fast").block_size
    s = ladder.v7_fast.staged_here(C, device, block, True, None)
    if s is None:
        s = ladder.v7_fast.staged_here(C, gpu.H200, block, True, None)
    return s.stages * s.slot, s.stages - 1, s


def check_staged_ring(ring_bytes, rows_in_flight, device=None) -> Verdict:
    """Q3: at C = 4096 in overwrite mode, one staged row group's ring of ``stages`` row slots (dout
    and inp, bf16): its bytes of shared memory, and the rows it has in flight while it works on
    one."""
    got, verdict = read_number(ring_bytes, "with a number of bytes (ring_bytes)", whole=True)
    if verdict is not None:
        return verdict
    rows, verdict = read_number(rows_in_flight, "with a number of rows (rows_in_flight)",
                                whole=True)
    if verdict is not None:
        return verdict
    want, in_flight, s = staged_ring(device=device)
    problems = []
    if got != want:
        why = {want * s.groups: "that is the block's rings: one per row group",
               want // 2: "that is one tensor: a slot holds a row's dout and inp",
               want * 3 // 2: "overwrite mode does not read dinp: a slot is dout and inp",
               want // s.stages: "that is one row slot: the ring has `stages` of them",
               want * 2: "bf16 is 2 bytes a value"}
        problems.append(f"ring_bytes {got} is not it: " + why.get(
            got, "stages x (dout + inp) x C x 2 bytes"))
    if rows != in_flight:
        why = {s.stages: "one of the slots holds the row being worked on",
               1: "every slot but the one worked on is being filled"}
        problems.append(f"rows_in_flight {rows} is not it: " + why.get(
            rows, "the ring's slots less the one worked on"))
    if problems:
        return failed("; ".join(problems))
    return passed(f"{want:,} bytes: {s.stages} slots x (dout + inp) x 4096 x 2 bytes, "
                  f"{s.groups} such rings in a block; {in_flight} rows in flight while one is "
                  "worked on, whatever the registers hold")
