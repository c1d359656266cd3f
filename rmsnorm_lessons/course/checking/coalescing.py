"""Whether a learner's kernel coalesces its loads and stores, read from the CPU twin's record of
every access (:mod:`rmsnorm_lessons.twin`, ``trace=``): exact, and the same verdict with or
without a GPU, since the twin runs on the host either way.

A warp's k-th access of a tensor is what its 32 lanes do together at step k of their loops (each
lane's accesses counted in its own order: the lanes of a warp run the same loop). Such a step is
coalesced when its addresses fall in the fewest 32-byte sectors the bytes it reads could fill: 32
neighbouring floats, 128 bytes, take 4 sectors; the same 32 floats a row's 32 blocks apart take 32.
:func:`worst_step` finds the first step that touches more; :func:`check` runs a rung at a small
shape and says, in a sentence, which warp, step and columns do, or what held.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SECTOR = 32  # bytes
READ, WRITE = 1, 2
#: the shape the check runs at: C a multiple of 32 (every lane takes as many columns as the next:
#: the lanes' steps line up), two blocks of 8 warps for the one-warp-per-row rungs
N, C = 16, 256
#: the tensors whose accesses are judged, in the order a message names them
TENSORS = ("inp", "dout", "weight", "dinp")


@dataclass(frozen=True)
class Step:
    """Step ``step`` of warp ``warp`` (in block ``block``): the byte offsets its lanes touched
    (lane order), the sectors they fall in, the distinct bytes they touched and the fewest sectors
    those bytes could fill."""

    block: int
    warp: int
    step: int
    lanes: tuple
    offsets: tuple
    sectors: int
    used: int
    fewest: int


def _sectors(offsets, sizes) -> tuple[int, int, int]:
    touched, used = set(), set()
    for o, b in zip(offsets, sizes):
        touched.update(range(o // SECTOR, (o + b - 1) // SECTOR + 1))
        used.update(range(o, o + b))
    return len(touched), len(used), -(-len(used) // SECTOR)


def steps(trace, buffer: int, kind: int, launch: int | None = None):
    """Every warp step of ``buffer``'s accesses of ``kind`` in ``trace``
    (:data:`rmsnorm_lessons.twin.execute.TRACE_DTYPE`), in launch, block, warp and step order."""
    t = trace[(trace["buffer"] == buffer) & (trace["kind"] == kind)]
    if launch is not None:
        t = t[t["launch"] == launch]
    if not len(t):
        return
    order = np.lexsort((np.arange(len(t)), t["thread"], t["block"], t["launch"]))
    t = t[order]
    thread_key = (t["launch"].astype(np.int64) << 42) | (t["block"].astype(np.int64) << 10) | \
        t["thread"].astype(np.int64)
    first = np.r_[True, thread_key[1:] != thread_key[:-1]]
    starts = np.flatnonzero(first)
    rank = np.arange(len(t)) - np.repeat(starts, np.diff(np.r_[starts, len(t)]))
    warp_key = (thread_key >> 5) << 20 | rank
    order = np.lexsort((t["thread"], warp_key))
    t, warp_key = t[order], warp_key[order]
    bounds = np.flatnonzero(np.r_[True, warp_key[1:] != warp_key[:-1], True])
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        g = t[lo:hi]
        yield Step(int(g["block"][0]), int(g["thread"][0]) // 32, int(warp_key[lo] & 0xFFFFF),
                   tuple(int(x) % 32 for x in g["thread"]), tuple(g["offset"].tolist()),
                   *_sectors(g["offset"].tolist(), g["bytes"].tolist()))


def worst_step(trace, buffer: int, kind: int, launch: int | None = None) -> Step | None:
    """The first step of ``buffer``'s accesses of ``kind`` that touches more sectors than its
    bytes fill, else None."""
    return next((s for s in steps(trace, buffer, kind, launch) if s.sectors > s.fewest), None)


def _columns(step: Step, itemsize: int, C: int) -> str:
    cols = [o // itemsize % C for o in step.offsets[:3]]
    return ", ".join(f"lane {lane} column {c}" for lane, c in zip(step.lanes[:3], cols))


def check(version, *, kernel_name: str = "your kernel", shape=(N, C),
          tensors=TENSORS) -> tuple[bool | None, str]:
    """Run ``version`` (a rung or its name) on the CPU twin at ``shape`` (C a multiple of 32),
    tracing ``tensors``. Returns ``(False, problem)`` where a warp's step touches more sectors than
    its bytes fill (the sentence names the tensor, the step, the warp and the lanes' columns),
    ``(True, what held)`` where none does, ``(None, why not)`` where nothing could be judged (no
    twin here, a construct it does not model, or a hazard: the correctness check names those)."""
    from ... import twin
    from ...core import ladder, reference

    why = twin.available()
    if why is not None:
        return None, why
    rung = ladder.get(version)
    n, c = shape
    p = reference.random_problem(n, c, rung.dtype, seed=3, accumulate=True)
    try:
        ran = twin.run_rung(rung, p["dout"], p["inp"], p["weight"], p["rstd"], p["dinp"],
                            p["dweight"], calls=1, seed=0, trace=tensors)
    except (twin.NeedsGPU, twin.TwinCompileError) as exc:
        return None, str(exc)[:300]
    if ran.hazards or ran.trace is None:
        return None, "the CPU twin's run stopped: " + (str(ran.hazards[0]) if ran.hazards
                                                       else "no record of the accesses")
    itemsize = np.dtype(rung.dtype).itemsize
    for k, name in enumerate(tensors):
        for kind, verb in ((READ, "read"), (WRITE, "write")):
            bad = worst_step(ran.trace, k, kind)
            if bad is None:
                continue
            return False, (f"on the CPU twin, {kernel_name}'s accesses are not coalesced: at "
                           f"{n}x{c}, the {bad.step + 1}{_th(bad.step + 1)} {verb} of {name} by "
                           f"the lanes of warp {bad.warp} in block {bad.block} "
                           f"({_columns(bad, itemsize, c)}, ...) touches {bad.sectors} sectors of "
                           f"32 bytes, where its {bad.used} bytes fit in {bad.fewest}: at each "
                           "step a warp's 32 lanes must touch neighbouring elements, not each a "
                           "block of columns of its own")
    return True, (f"each warp step of its accesses to {', '.join(tensors)} touches the fewest "
                  f"32-byte sectors (the CPU twin's record of every access at {n}x{c})")


def judged(verdict, version, *, kernel_name: str):
    """A kernel exercise's verdict with the access pattern judged too (:func:`check`): a PASS
    whose accesses are not coalesced becomes NOT YET, saying where; a PASS whose are says so;
    where the pattern cannot be judged here the PASS stands and says what was not checked. NOT YET
    and NOT VERIFIED come back as they are (their kernel did not run, or ran wrong)."""
    from ..verdict import failed, passed

    if not verdict.passed:
        return verdict
    ok, sentence = check(version, kernel_name=kernel_name)
    if ok is False:
        out = failed(f"{sentence}. Its numbers were right at every shape checked: only the "
                     "access pattern is off")
        out.kinds = ("uncoalesced",)
        return out
    note = sentence if ok else f"the access pattern was not checked ({sentence})"
    head = verdict.message.rstrip()
    return passed(f"{head}{'' if head.endswith('.') else '.'} {note[0].upper()}{note[1:]}.")


def _th(k: int) -> str:
    return "th" if 10 <= k % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(k % 10, "th")
