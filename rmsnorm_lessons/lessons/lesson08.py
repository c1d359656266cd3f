"""Lesson 08 (the last block): atomicInc's wrap-around, and what happens without a reset."""
from __future__ import annotations

import numpy as np

from ..course.plots import FIGSIZE, _outside_pyplot
from ..course.verdict import Verdict, call_answer, choice_verdict, failed, passed, read_number
from ..inspection import access
from ..inspection.access import atomic_inc

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
    from ..course.checking import kernel as kc

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
                kc.sass_has(("ATOMG", "ATOM"), "an atomic ticket (ATOMG)",
                            "take the ticket with atomicInc(ticket_counter, gridDim.x - 1)",
                            kernel=kernel),
                kc.no_local_memory(kernel)))


# --- the questions at the lesson's end
# ----------------------------------------------------------------

def check_partial_floats(answer, grid: int = 264, C: int = 1024) -> Verdict:
    """The floats of partials the last block of v6 reads, with ``grid`` blocks and C channels."""
    got, verdict = read_number(answer, "with a number of floats", whole=True)
    if verdict is not None:
        return verdict
    want = grid * C
    if got == want:
        return passed(f"{want} floats: C = {C} sums from each of the {grid} blocks, its own "
                      "included; the other C floats of each block's 2 * C slice are never touched")
    for wrong, hint in ((2 * want, "the slices are 2 * C floats apart, but each block writes, and "
                                   "the last block reads, C of them"),
                        ((grid - 1) * C, "the last block wrote its own partials before it drew its "
                                         "ticket, and its sum includes them"),
                        (C, "that is one block's slice: the last block adds every block's")):
        if got == wrong:
            return failed(f"{got} is not it: {hint}")
    return failed(f"{got} is not it: count the blocks whose partials are summed, and the floats "
                  "each one wrote")


def check_ldcg(answer) -> Verdict:
    """What ``__ldcg`` does for the last block's reads of the partials:
    a) it orders them after the other blocks' writes;
    b) it serves them from L2, so a stale line in this SM's L1 cannot answer;
    c) it makes each read atomic."""
    return choice_verdict(answer, "b", {
        "a": "ordering is the fences' job; a cache operator says where a load is served from, "
             "not when it may happen",
        "c": "nobody writes the partials while the last block reads them: there is nothing for "
             "an atomic read to guard against"},
        "L1 is not kept coherent with other SMs' writes; L2 is where all SMs' writes meet")


def check_second_wave(answer) -> Verdict:
    """v6 launched with more blocks than the GPU holds at once (a second wave):
    a) still right: no block ever waits for another;
    b) it hangs: the last block waits for blocks that are not resident yet;
    c) two blocks can draw the same ticket."""
    return choice_verdict(answer, "a", {
        "b": "look for a loop that waits in v6: a block that does not draw the last ticket "
             "returns, and the last ticket is drawn only once all the others are",
        "c": "atomicInc is one read-modify-write at a time: each call returns a different old "
             "value within a launch"},
        "every block writes, fences, draws a ticket and either returns or sums; none spins on "
        "another, so the order in which blocks become resident does not matter")


def check_wrap_row(answer, C: int = 16384) -> Verdict:
    """The first row whose offset ``row * C``, computed in 32-bit ``int``, wraps."""
    got, verdict = read_number(answer, "with a row number", whole=True)
    if verdict is not None:
        return verdict
    want = (2**31 - 1) // C + 1
    if got == want:
        return passed(f"row {want}: {want} x {C} = {want * C} > 2**31 - 1, the largest int")
    for wrong, hint in ((want - 1, "that row's offset still fits: it is the last row that does"),
                        ((2**32 - 1) // C + 1, "an int is signed: it wraps past 2**31 - 1, not "
                                               "2**32 - 1"),):
        if got == wrong:
            return failed(f"{got} is not it: {hint}")
    return failed(f"{got} is not it: find the smallest row with row * C > 2**31 - 1")


def ticket_timeline(blocks: int = 8, seed: int = 0, reduce_time: float = 0.35):
    """A made-up run of v6: blocks finish their rows in some order, each takes a ticket from the
    counter (atomicInc wraps it to 0 at the last ticket), and the block with ticket blocks-1 sums
    all partials. Times are illustrative, not measured."""
    rng = np.random.default_rng(seed)
    finish = 1.0 + 0.25 * rng.random(blocks)
    order = np.argsort(finish, kind="stable")
    ticket = np.empty(blocks, int)
    ticket[order] = np.arange(blocks)
    fig, (ax, axc) = _outside_pyplot((FIGSIZE[0], FIGSIZE[1] + 1.0), nrows=2, ncols=1, sharex=True,
                                  gridspec_kw=dict(height_ratios=[3, 1.2]))
    for b in range(blocks):
        last = ticket[b] == blocks - 1
        ax.barh(b, finish[b], height=0.6, color="#9ecae1")
        ax.plot(finish[b], b, "o", color="#d62728" if last else "black", ms=4)
        ax.text(finish[b] - 0.01, b, f"ticket {ticket[b]}", fontsize=7, ha="right", va="center")
        if last:
            ax.barh(b, reduce_time, left=finish[b], height=0.6, color="#fd8d3c")
            ax.text(finish[b] + reduce_time / 2, b, "sums all\npartials", fontsize=6, ha="center",
                    va="center")
    ax.set_yticks(range(blocks), [f"block {b}" for b in range(blocks)], fontsize=7)
    ax.invert_yaxis()
    ax.set_title("each block: its rows (from t=0), its partials, a ticket; the last ticket reduces",
                 fontsize=9)
    # the counter: 0, 1, ..., blocks-1, then the last atomicInc wraps it back to 0
    times = np.concatenate([[0.0], np.sort(finish)])
    value = [0]
    for _ in range(blocks):
        value.append(access.atomic_inc(value[-1], blocks - 1))
    axc.step(np.append(times, times[-1] + reduce_time + 0.05), value + [value[-1]], where="post",
             color="black")
    axc.set_ylabel("counter", fontsize=8)
    axc.set_xlabel("time (illustrative)", fontsize=8)
    axc.set_yticks([0, blocks - 1])
    axc.tick_params(labelsize=7)
    axc.set_xlim(0.8, times[-1] + reduce_time + 0.1)  # every block works on its rows from time 0
    return fig
