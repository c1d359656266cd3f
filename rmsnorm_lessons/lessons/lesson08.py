"""Lesson 08 (v6, the seed's kernel10): the learner measures v5, names what its second launch
costs, decides what must be fenced and where, writes the end of v6 (the partials, the fences, the
ticket and the last block's sum) and measures what changed.

* :func:`opening`: v5_two_pass at 16384 x 2048 with its second kernel profiled too; ``after=True``:
  v6_last_block; :func:`check_diagnosis` judges the learner's reading;
* the decision :func:`check_fences` on :func:`outline`; the kernel exercise :func:`check_v6_kernel`;
* the questions; the Explore tail's ``atomicInc`` rule and the seed's tickets without a reset.
"""
from __future__ import annotations

import numpy as np

from ..course.plots import FIGSIZE, _outside_pyplot
from ..course.verdict import Verdict, call_answer, choice_verdict, failed, passed, read_number
from .changed import guess_beside  # noqa: F401 (the what-changed cell's guess)
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


# --- the opening and the diagnosis
# --------------------------------------------------------------------

SHAPE = (16384, 2048)
BEFORE, AFTER = "v5_two_pass", "v6_last_block"
SECOND = "reduce_dweight_v5"  # v5's second kernel: the opening profiles it too
THIS_LESSON = ("second_launch",)

_SEEN: dict = {}


def opening(after: bool = False):
    """v5_two_pass at 16384 x 2048 with its second kernel, ``reduce_dweight_v5``, profiled too,
    measured on this GPU (without a GPU or ncu, the saved run's), printed without a reading;
    ``after=True``: v6_last_block, one kernel."""
    from ..course import investigate
    from . import lesson07

    # v5 as lesson 07 closed with it (the same call, so one saved entry): both kernels profiled
    found = investigate.opening(AFTER, *SHAPE) if after else lesson07.measured_call(BEFORE)
    _SEEN[bool(after)] = found
    return found


def measured(after: bool = False):
    """The opening this process measured (or loaded) last, else :func:`opening`'s: what the
    diagnosis is judged against, and where a solution reads a figure from."""
    return _SEEN.get(bool(after)) or opening(after)


def check_diagnosis(bound=None, cause=None, metric=None, value=None,
                    against=None) -> Verdict:
    """The learner's reading of v5's opening (see :func:`rmsnorm_lessons.lessons.lesson05.
    check_diagnosis` for the arguments)."""
    from .diagnosis import judge

    seen = against if against is not None else measured()
    return judge(seen, bound=bound, cause=cause, metric=metric, value=value,
                 this_lesson=THIS_LESSON, rung="v6_last_block")


# --- the decision: what must be fenced, and where
# ----------------------------------------------------

#: the end of a v6 block, after its rows (None: an empty slot)
OUTLINE = ("every thread stores its share of the block's C sums into the block's slice of partials",
           None,
           "__syncthreads()",
           "thread 0 draws a ticket: ticket = atomicInc(counter, limit)",
           None,
           "__syncthreads()",
           "every block whose ticket is not the last one returns",
           "the last block reads every block's partials (with __ldcg) and sums them in block order",
           None,
           "the last block adds its sums into dweight")
RELEASE, ACQUIRE = 2, 5


def outline() -> None:
    """Print the end of a v6 block with its empty slots numbered."""
    print("the end of a v6 block, after its rows:")
    for i, line in enumerate(OUTLINE, 1):
        print(f"  {i:>2}  {line or '(empty)'}")
    print("Which empty slots need a __threadfence()? fences = {...}")


def check_fences(fences) -> Verdict:
    """The decision: the slots of :func:`outline` that need a ``__threadfence()``."""
    empty = {i for i, line in enumerate(OUTLINE, 1) if line is None}
    if fences is None or fences is Ellipsis:
        return failed("replace the ... with a set of slot numbers, e.g. {2}")
    try:
        chosen = {int(f) for f in fences}
    except (TypeError, ValueError):
        return failed(f"give a set of slot numbers, e.g. {{2}}, got {fences!r}")
    if not chosen <= empty:
        return failed(f"slots {sorted(chosen - empty)} hold a step already; the empty ones are "
                      f"{sorted(empty)}")
    if RELEASE not in chosen:
        return failed("without a fence at 2, nothing orders this block's partials before its "
                      "ticket for the other SMs: the last block may see the counter at its last "
                      "value and still read an old partial. The barrier at 3 orders the block's "
                      "threads among themselves, not what other SMs see (release: every thread "
                      "fences its own stores, then the barrier, then the ticket)")
    if ACQUIRE not in chosen:
        return failed("without a fence at 5, the last block's reads are not ordered after the "
                      "ticket it saw: in the PTX memory model a release pairs with an acquire "
                      "(fence-fence synchronization), and __ldcg orders nothing, it only reads "
                      "through L2 instead of this SM's L1")
    if 9 in chosen:
        return failed("a fence at 9 orders the last block's reads before its stores to dweight; "
                      "nothing else in this kernel reads dweight, so it buys nothing")
    return passed("2: every thread fences its own partials before the barrier, so the ticket "
                  "(drawn after the barrier) publishes them: the release; 5: the thread that drew "
                  "the last ticket fences before its block reads (the barrier at 6 carries that "
                  "to the whole block): the acquire. v6 fences at 5 only in the last block, "
                  "under if (ticket == last): the other blocks read nothing")


# --- the kernel exercise: v6's end, from the partials to the last block's sum
# --------------------------

#: the seed's limit: atomicInc(counter, gridDim.x) leaves gridDim.x in the counter
SEED_LIMIT = r"\batomicInc\s*\([^,;]+,\s*gridDim\.x\s*\)"


def seed_limit_trace(blocks: int = 4) -> str:
    """What the seed's limit does over three launches of ``blocks`` blocks with no reset."""
    first, second, third = seed_tickets(blocks, 3)
    return (f"with {blocks} blocks, launch 1 draws {first} and leaves {blocks} in the counter; "
            f"launch 2 draws {second}: nobody draws {blocks - 1}, so nobody sums; launch 3 draws "
            f"{third}: its FIRST finisher draws {blocks - 1} and sums partials not yet written")


#: bytes of spill or stack frame the check lets pass: v6 sits at the 64 registers its launch bounds
#: allow, and ptxas spills 4 B of an end written one way where another spills none (sm_90)
FEW_BYTES = 8


def little_local_memory(kernel: str, most: int = FEW_BYTES):
    """A stack frame and spills of at most ``most`` bytes (ptxas at v6's register bound); a local
    array or real spilling is NOT YET."""
    from ..course.checking import static as ks

    def test(c):
        r = c.compiled.resources.get(kernel)
        if r is None or max(r.stack_bytes, r.spill_stores, r.spill_loads) <= most:
            return None
        return (f"the kernel uses local memory ({r.stack_bytes} B stack frame, {r.spill_stores} B "
                "of spill stores): a local array indexed at run time, or more values live at "
                "once than v6's 64 registers a thread hold; keep the last block's loop to a few "
                "values a thread")

    return ks.Static(f"at most {most} B of local memory (ptxas at v6's 64-register bound)", test,
                     sass=False)


def release_order(kernel: str):
    """The release, judged in the SASS between the block's last global store before the ticket (its
    partials) and the ticket's first atomic: a barrier (BAR) and a fence (MEMBAR) both lie there,
    in either order. Fence, then barrier (the lesson's slot 2: every thread fences its own
    stores, then the block meets) and barrier, then fence (cooperative groups' grid sync: the block
    meets, then thread 0's fence, cumulative, covers every store the barrier ordered before it)
    both make every thread's partials visible before the ticket. No barrier there: thread 0 may
    take the ticket while other warps are still storing; no fence after the stores: the fence
    orders nothing of them."""
    from ..course.checking import static as ks

    def test(c):
        ins = c.instructions(kernel)
        atoms = ks._matching(ins, ("ATOMG", "ATOM"))
        if not atoms:
            return ("the release's order: not checked, there is no ATOMG/ATOM in the SASS of "
                    f"{kernel} yet")
        ticket = atoms[0].offset
        stores = [i.offset for i in ks._matching(ins, "STG") if i.offset < ticket]
        after = stores[-1] if stores else -1
        fences = [i for i in ks._matching(ins, "MEMBAR") if after < i.offset < ticket]
        barriers = [i for i in ks._matching(ins, "BAR") if after < i.offset < ticket]
        if not barriers:
            return ("no __syncthreads() after the partials' stores and before the ticket: thread "
                    "0 may draw the ticket while other warps of its block are still writing "
                    "their partials, and the last block would sum them incomplete (no BAR "
                    "between the last STG and the first ATOMG/ATOM in the SASS)")
        if not fences:
            return ("no fence after the partials' stores and before the ticket: a fence orders "
                    "only the stores made before it (no MEMBAR between the last STG and the "
                    "first ATOMG/ATOM in the SASS)")
        return None

    return ks.Static("a barrier (BAR) and a fence (MEMBAR) between the partials' stores and the "
                     "ticket's atomic", test)


def check_v6_kernel(source: str, sanitize: bool = True) -> Verdict:
    """Lesson 08's kernel exercise: the end of the learner's ``rmsnorm_backward_v6`` (the block's
    partials, the release fence, the ticket, the acquire fence, the last block's sum into dweight),
    checked as the rung ``yours_v6`` with v6_last_block's plan and defines (the checked call is the
    launcher's second, so a counter left non-zero shows), and timed beside v6_last_block.
    compute-sanitizer's race check runs by default; ``sanitize=False`` skips it, for speed."""
    from ..course.checking import kernel as kc

    kernel = "rmsnorm_backward_v6"
    trace = seed_limit_trace()
    return kc.check_kernel(
        source, name="yours_v6", like="v6_last_block", rows_per_block=16, sanitize_it=sanitize,
        hints={"dweight unchanged": "No block drew the last ticket in this (second) launch: the "
                                    "counter must be back at 0 when a launch ends; " + trace,
               "dweight blocks": "Only the block holding the last ticket may sum the partials, "
                                 "after all others have written theirs, each block's C sums once"},
        static=(kc.source_lacks(SEED_LIMIT, "atomicInc's limit is not the seed's gridDim.x",
                                "atomicInc(counter, gridDim.x) is the seed's limit: the last "
                                "ticket stores gridDim.x, and the next launch starts there; "
                                + trace + ". Which limit wraps the last ticket back to 0?"),
                kc.sass_before("MEMBAR", ("ATOMG", "ATOM"),
                               "a fence (MEMBAR) before the ticket's atomic (ATOMG)",
                               "no fence between writing the partials and taking the ticket: "
                               "another block may see the ticket before the partials; the "
                               "release fence comes before the barrier and the ticket",
                               kernel=kernel),
                release_order(kernel),
                kc.sass_has("MEMBAR", "a second fence (MEMBAR) for the last block's acquire",
                            "the last block needs its own fence after drawing the last ticket "
                            "and before reading the partials (acquire)", kernel=kernel,
                            at_least=2),
                kc.sass_has(("ATOMG", "ATOM"), "an atomic ticket (ATOMG)",
                            "take the ticket with atomicInc on ticket_counter", kernel=kernel),
                little_local_memory(kernel)))


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


def check_membar_count(answer, N: int = SHAPE[0], C: int = SHAPE[1]) -> Verdict:
    """Q2: how many warp-level fence instructions (MEMBAR) one v6 call executes at N x C on this
    GPU (every warp of every block runs the release fence; the last block's thread 0 the
    acquire)."""
    from ..core import gpu, ladder

    got, verdict = read_number(answer, "with a number of MEMBAR instructions executed", whole=True)
    if verdict is not None:
        return verdict
    device, label = gpu.facts_or_fallback()
    [launch] = ladder.plan(AFTER, N, C, device)
    warps = launch.block // 32
    want = launch.grid * warps + 1
    if got == want:
        return passed(f"{launch.grid} blocks x {warps} warps run the release fence once each, and "
                      f"one warp of the last block the acquire: {want:,} on {label}. A warp "
                      "executes one instruction for its 32 threads")
    for wrong, hint in ((2, "that is the program: two __threadfence() in the text; count how "
                           "many warps execute each"),
                        (launch.grid * launch.block + 1, "that counts threads; a warp executes "
                                                         "one instruction for its 32"),
                        (launch.grid * warps, "and the last block's acquire: one more warp runs "
                                              "the second fence"),
                        (launch.grid * 2, "every warp of a block runs the release fence, not one "
                                          "per block")):
        if got == wrong:
            return failed(f"{got:,} is not it: {hint}")
    return failed(f"{got:,} is not it: the plan launches {launch.grid} blocks of {warps} warps "
                  "here; which fence does each warp execute, and which only one warp?")


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
