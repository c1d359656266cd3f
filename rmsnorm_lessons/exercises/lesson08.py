"""Lesson 08 (the last block): atomicInc's wrap-around, and what happens without a reset."""
from __future__ import annotations

from ..access import atomic_inc
from . import Verdict, call_answer, failed, passed

PAIRS = [(old, limit) for limit in (0, 1, 2, 3, 7, 263, 264, 2**32 - 1)
         for old in sorted({0, 1, 2, limit - 1, limit, limit + 1, 2**32 - 1}) if 0 <= old < 2**32]


def check_atomic_inc(fn) -> Verdict:
    """``fn(old, limit)`` -> the value atomicInc stores (it returns ``old``, the ticket)."""
    for old, limit in PAIRS:
        got, verdict = call_answer(fn, old, limit, at=f"at old={old}, limit={limit}")
        if verdict is not None:
            return verdict
        want = atomic_inc(old, limit)
        if got != want:
            hint = ""
            if old == limit and got == old + 1:
                hint = " (the counter wraps when old >= limit, not when it passes limit)"
            elif old == limit - 1 and got == 0:
                hint = " (it wraps after reaching limit, so old = limit - 1 still becomes limit)"
            return failed(f"at old={old}, limit={limit}: you gave {got}, atomicInc stores "
                          f"{want}{hint}")
    return passed(f"right on all {len(PAIRS)} cases: ((old >= limit) ? 0 : old + 1)")


def seed_tickets(blocks: int, launches: int, limit: int | None = None, start: int = 0):
    """Tickets drawn in each launch (in finishing order) when nobody resets the counter between
    launches.

    The seed calls ``atomicInc(flag, gridDim.x)`` (``limit = blocks``); v6 calls it with ``blocks -
    1``.
    """
    limit = blocks if limit is None else limit
    counter, out = start, []
    for _ in range(launches):
        drawn = []
        for _ in range(blocks):
            drawn.append(counter)
            counter = atomic_inc(counter, limit)
        out.append(drawn)
    return out


def check_seed_tickets(launch2, launch3, blocks: int = 4) -> Verdict:
    """The tickets of launches 2 and 3 (in finishing order) of the seed's kernel with no host
    reset."""
    if launch2 is None or launch3 is None:
        return failed("replace None with two lists of tickets, e.g. [0, 1, 2, 3]")
    _, want2, want3 = seed_tickets(blocks, 3)
    try:
        got2, got3 = [int(t) for t in launch2], [int(t) for t in launch3]
    except (TypeError, ValueError):
        return failed("give each launch as a list of whole numbers")
    if got2 == want2 and got3 == want3:
        return passed(f"launch 2 draws {want2}: nobody gets {blocks - 1}, so nobody adds into "
                      f"dweight; launch 3 draws {want3}: the FIRST block to finish sums partials "
                      f"the others have not written yet")
    if got2 == list(range(blocks)):
        return failed("after launch 1 the counter is not 0: the seed's atomicInc(flag, gridDim.x) "
                      "stops at gridDim.x and wraps only on the next call")
    if got2 != want2:
        return failed(f"launch 2 is not {got2}: start from the counter launch 1 leaves behind")
    return failed(f"launch 2 is right; launch 3 is not {got3}: continue from where launch 2 leaves "
                  "the counter")


# --- the kernel exercise: v6's fence, ticket and last block
# ------------------------------------------

def check_v6_kernel(source: str, sanitize: bool = True) -> Verdict:
    """Lesson 08's kernel exercise: the learner's ``rmsnorm_backward_v6`` (the release fence, the
    atomicInc ticket, the last block's acquire fence and sum), checked as the rung ``yours_v6`` with
    v6_last_block's plan and defines, and timed beside v6_last_block.
    compute-sanitizer's race check runs by default; ``sanitize=False`` skips it, for speed."""
    from . import kernel_check as kc

    kernel = "rmsnorm_backward_v6"
    return kc.check_kernel(
        source, name="yours_v6", like="v6_last_block", rows_per_block=16, sanitize_it=sanitize,
        hints={"dweight unchanged": "No block drew the last ticket in this (second) launch: the "
                                    "counter must be back at 0 when a launch ends, so atomicInc's "
                                    "limit is gridDim.x - 1",
               "dweight blocks": "Only the block holding the last ticket may sum the partials, "
                                 "after all others have written theirs"},
        static=(kc.sass_before("MEMBAR", ("ATOMG", "ATOM"),
                               "a fence (MEMBAR) before the ticket's atomic (ATOMG)",
                               "no fence between writing the partials and taking the ticket: "
                               "another block may see the ticket before the partials; put "
                               "__threadfence() before atomicInc",
                               kernel=kernel),
                kc.sass_between("MEMBAR", "BAR", ("ATOMG", "ATOM"),
                                "a barrier (BAR) between the fence and the ticket",
                                "no __syncthreads() between the fence and the ticket: thread 0 "
                                "may draw the ticket while other warps of its block are still "
                                "writing their partials, and the last block would sum them "
                                "incomplete",
                                kernel=kernel),
                kc.sass_has("MEMBAR", "a second fence (MEMBAR) for the last block's acquire",
                            "the last block needs its own __threadfence() after drawing the last "
                            "ticket and before reading the partials (acquire)", kernel=kernel,
                            at_least=2),
                kc.sass_has(("ATOMG", "ATOM"), "an atomic ticket (ATOMG.INC)",
                            "take the ticket with atomicInc(ticket_counter, gridDim.x - 1)",
                            kernel=kernel),
                kc.no_local_memory(kernel)))
