"""Lesson 06's kernel exercise (v4's ``staged()``, its two uses, and the cache hints of the
second loop's loads and store) and the question that asks for one line of v4: a streaming store
(:func:`check_streaming_store`), compiled into v4 and read in its SASS."""
from __future__ import annotations

import re

import numpy as np

from ...core import build, gpu, ladder
from ...course.verdict import Verdict, failed, not_verified, passed
from ..lesson05 import wide_accesses
from .slots import WIDTHS, worst_conflict

KERNEL = "rmsnorm_backward_v4"
#: staged() left as the interleaved slot (c): right results, an 8-way bank conflict on every shared
#: atomic
INTERLEAVED_SLOT = r"int\s+staged\s*\([^)]*\)\s*\{\s*return\s+c\s*;\s*\}"
#: when dweight alone is wrong: the slots are where to look
SLOT_HINT = ("where dinp is right, look at the staging: staged() must give each channel 0..C-1 a "
             "slot of its own in 0..C-1 (the slot you decided above, for any C % 8 == 0), and the "
             "flush must read channel c back from staged(c, C)")
#: the line of v4 the question replaces
STORE_LINE = "store128cg(dinp_row + c, d);"
#: an evict-first load of weight in the learner's text (the hint is dout's and inp's)
WEIGHT_HINTED = re.compile(r"\b(?:load128cs|__ldcs)\s*\([^;,]*\bweight\b")


def _hinted(prefix: str, hint_word: str, what: str, hint: str, at_least: int):
    """At least ``at_least`` 128-bit ``prefix`` (LDG/STG) instructions of the main kernel carry
    ``hint_word`` (EF, STRONG) in their opcode."""
    from ...course.checking import static as ks

    def test(c):
        found = [i.opcode for i in ks._matching(c.instructions(KERNEL), prefix + ".128")
                 if hint_word in i.opcode.split(".")]
        if len(found) >= at_least:
            return None
        return f"{hint} (the SASS of {KERNEL} has {len(found)}, expected at least {at_least})"

    return ks.Static(what, test)


def cache_hints() -> tuple:
    """The hints' SASS: dout and inp's last reads evict-first, the dinp store with a hint."""
    from ...course.checking import static as ks

    counted = _hinted("LDG", "EF", "two evict-first 128-bit loads (LDG.E.EF.128) of dout and "
                      "inp in the second loop", "the second loop reads dout and inp for the last "
                      "time: ask the caches to evict those lines first (load128cs, __ldcs)", 2)

    def only_dout_and_inp(c):  # the SASS counts EF loads, not whose: the text says which
        if WEIGHT_HINTED.search(c.text):
            return ("weight is loaded evict-first (load128cs or __ldcs on weight): every row of "
                    "every block reads weight again, so its lines are the ones to keep in the "
                    "caches; the hint belongs on dout and inp, which the second loop reads for "
                    "the last time (load weight with load128)")
        return counted.test(c)

    loads = ks.Static(counted.what, only_dout_and_inp)

    def store(c):
        stores = ks._matching(c.instructions(KERNEL), "STG.128")
        if any({"STRONG", "EF"} & set(i.opcode.split(".")) for i in stores):
            return None
        shown = ", ".join(sorted({i.opcode for i in stores})) or "none"
        return ("the dinp store carries no cache hint (the SASS has " + shown + "): nothing in "
                "this kernel reads dinp again; store it cache-global (store128cg, __stcg: "
                "STG.E.128.STRONG.GPU) or streaming (store128cs, __stcs: STG.E.EF.128)")

    return (loads, ks.Static("a 128-bit store of dinp with a cache hint (STRONG.GPU or EF)",
                             store))


#: appended to the learner's text: every channel's slot at each width of the decision's check
SLOTS_PROBE = r"""
extern "C" __global__ void lesson06_slots(int* slots, const int* widths, int count) {
    int at = 0;
    for (int w = 0; w < count; w++) {
        for (int c = threadIdx.x; c < widths[w]; c += blockDim.x) {
            slots[at + c] = staged(c, widths[w]);
        }
        at += widths[w];
    }
}
"""


def kernel_slots(text: str):
    """``({C: slots}, None)``: what the learner's ``staged(c, C)`` gives every channel at each
    width of :data:`WIDTHS`, run on the CPU twin; or ``(None, why)``."""
    from .. import probe

    widths = np.array(WIDTHS, np.int32)
    out = np.full(int(widths.sum()), -1, np.int32)
    arrays, why = probe.run(text + SLOTS_PROBE, "lesson06_slots", grid=1, block=256,
                            args=[("slots", out), ("widths", widths), len(WIDTHS)],
                            name="yours_v4")
    if arrays is None:
        return None, why
    bounds = np.cumsum([0, *WIDTHS])
    return {C: arrays["slots"][a:b] for C, a, b in zip(WIDTHS, bounds, bounds[1:])}, None


def _a(n: int) -> str:
    return "an" if str(n).startswith("8") or n in (11, 18) else "a"


def _layout(c) -> str | None:
    """The staging's banks, judged on the learner's own ``staged()``: every access of
    dweight_shared goes through it, each channel has a slot of its own at every width, and every
    shared atomic of the loop (element k of the 32 lanes' chunks, at every step) reaches 32
    banks."""
    from .. import probe

    body = c.text[c.text.find(KERNEL):]
    for line, index in probe.index_expressions(body, "dweight_shared"):
        if not probe.through(body, index, "staged"):
            return (f"dweight_shared[{index}] does not go through staged(): every add and the "
                    "flush reach channel c's word as staged(c, C), the slot you decided (the "
                    "check judges your layout by it)")
    from ... import twin

    if twin.available() is not None:  # no twin here: the kernel check's verdict says so
        return None
    found, why = kernel_slots(c.text)
    if found is None:
        return f"staged(c, C) could not be run on the CPU twin: {why}"
    for C, slots in found.items():
        values, counts = np.unique(slots, return_counts=True)
        if slots.min() < 0 or slots.max() >= C or values.size < C:
            shared = values[counts > 1]
            said = (f"channels {', '.join(map(str, np.flatnonzero(slots == shared[0])[:2]))} "
                    f"share slot {shared[0]}" if shared.size else
                    f"a slot lies outside 0 .. {C - 1}")
            return f"staged() at C = {C}: {said}; each channel needs a slot of its own"
        degree, step, k, banks = worst_conflict(slots, C)
        if degree > 1:
            return (f"staged() as your kernel computes it: at C = {C}, step {step}, the k = {k} "
                    f"adds of a warp's 32 lanes reach {banks} banks, {_a(degree)} {degree}-way "
                    "bank conflict on that shared atomic (and on every one like it): give the 32 "
                    "lanes' words for one k 32 different banks")
    return None


def check_v4_kernel(source: str, sanitize: bool = True) -> Verdict:
    """Lesson 06's kernel exercise: the learner's ``rmsnorm_backward_v4`` and ``add_dweight_v4``
    with their ``staged()`` slot, its two uses and the second loop's hinted loads and store,
    checked as the rung ``yours_v4`` with v4_vec_bf16's plan, and timed beside v4_vec_bf16.
    compute-sanitizer's race check runs by default; ``sanitize=False`` skips it, for speed."""
    from ...course.checking import kernel as kc
    from ...course.checking import static as ks

    return kc.check_kernel(
        source, name="yours_v4", like="v4_vec_bf16", sanitize_it=sanitize,
        hints={"dweight wrong": SLOT_HINT},
        static=(*wide_accesses(KERNEL), *cache_hints(),
                kc.source_lacks(INTERLEAVED_SLOT, "staged() is not the interleaved slot c",
                                "staged() returns c, the interleaved slot: for one k the 32 lanes "
                                "then hit banks (8 * lane + k) % 32, 4 banks with 8 lanes each, an "
                                "8-way conflict on every shared atomic; return the slot you "
                                "decided"),
                ks.Static("every shared atomic of the loop reaches 32 banks (your staged(), run "
                          "on the CPU twin at C = " + ", ".join(map(str, WIDTHS)) + ")",
                          _layout, sass=False)))


def _store_rung(line: str):
    """v4 as shipped with ``line`` in place of its dinp store, as an unregistered rung."""
    text = build.kernel_source("v4_vec_bf16")
    if text.count(STORE_LINE) != 1:
        raise RuntimeError(f"kernels/v4_vec_bf16.cu no longer holds {STORE_LINE!r} once")
    return ladder.rung_from_source(name="q3_store", source=text.replace(STORE_LINE, line),
                                   like="v4_vec_bf16", register_it=False)


def store_opcodes(line: str):
    """``(opcodes, None)``: the 128-bit global stores of v4's main kernel with ``line`` in place of
    its dinp store, compiled for this GPU's arch (else the default target); or ``(None, message)``
    with nvcc's errors."""
    from ...inspection import sass

    rung = _store_rung(line)
    arch = gpu.facts().arch if gpu.why_unavailable() is None else build.DEFAULT_ARCH
    try:
        listing = sass.listing(rung, arch)
    except build.CompileError as exc:
        return None, exc.summary(stem="q3_store")
    ins = listing.functions[KERNEL].instructions
    return [i.opcode for i in ins if i.opcode.startswith("STG") and ".128" in i.opcode], None


#: where Q3's line runs on the CPU twin: 5 rows (a block of warps, each a row of its own), C = 264
#: (lane 0 stores two chunks, at columns 0 and 256; most lanes one)
STORE_SHAPE = (5, 264)
STORE_SHAPE_TEXT = f"{STORE_SHAPE[0]}x{STORE_SHAPE[1]}"


def _chunk(offset: int, C: int) -> str:
    row, col = divmod(offset // 2, C)
    return f"row {row}, columns {col}-{col + 7}"


def store_on_twin(line: str):
    """``(wrong, why_not)``: v4 with ``line`` as its dinp store run on the CPU twin at
    :data:`STORE_SHAPE` with every access to dinp traced. ``wrong`` is None where every 16-byte
    chunk of dinp is stored once, at its own 16-byte-aligned address, with the value the float64
    reference gives; else a sentence naming the part that is off (the address: misaligned, a chunk
    never stored or stored more than once, a race; the value: right places, wrong numbers).
    ``why_not`` says why nothing was judged (no twin here), else None."""
    from ... import twin
    from ...core import compare, reference

    why = twin.available()
    if why is not None:
        return None, why
    N, C = STORE_SHAPE
    rung = _store_rung(line)
    p = reference.random_problem(N, C, rung.dtype, seed=6, accumulate=True)
    try:
        ran = twin.run_rung(rung, p["dout"], p["inp"], p["weight"], p["rstd"], p["dinp"],
                            p["dweight"], calls=1, seed=0, trace=("dinp",))
    except (twin.NeedsGPU, twin.TwinCompileError) as exc:
        return None, f"the CPU twin cannot take it: {str(exc)[:200]}"
    address = "its address is not where the chunk belongs"
    if ran.trace is not None and len(ran.trace):
        writes = ran.trace[ran.trace["kind"] == 2]
        # the twin logs a 16-byte store as its four 4-byte words, in the thread's order
        for (block, thread) in {(int(w["block"]), int(w["thread"])) for w in writes}:
            mine = writes[(writes["block"] == block) & (writes["thread"] == thread)]["offset"]
            starts = mine[: len(mine) - len(mine) % 4: 4]
            if len(mine) % 4 or (starts % 16).any():
                at = int(starts[(starts % 16) != 0][0]) if (starts % 16).any() else int(mine[0])
                return (f"{address}: at {N}x{C}, thread {thread} of block {block} stores 16 bytes "
                        f"at byte {at} of dinp, not a multiple of 16 (a 128-bit store must be "
                        "16-byte aligned: on a GPU that is a misaligned-address fault). The "
                        "question gives the address each chunk goes to"), None
        words, counts = np.unique(writes["offset"] // 16 * 16, return_counts=True)
        offsets, counts = words, counts // 4
        want = np.arange(0, N * C * 2, 16)
        missing = np.setdiff1d(want, offsets)
        twice = offsets[counts > 1]
        if missing.size or twice.size:
            said = []
            if missing.size:
                said.append(f"{missing.size} of dinp's {want.size} 16-byte chunks are never stored "
                            f"(the first: {_chunk(int(missing[0]), C)})")
            if twice.size:
                said.append(f"{twice.size} are stored more than once (the first: "
                            f"{_chunk(int(twice[0]), C)}, {int(counts[counts > 1][0])} times)")
            return (f"{address}: run on the CPU twin at {N}x{C}, " + " and ".join(said) + ". "
                    "Each lane's chunk of its warp's row goes back where it was read: the "
                    "question gives that address"), None
    if ran.hazards:
        return (f"{address}: the CPU twin found {ran.hazards[0]}. The question gives the address "
                "each chunk goes to"), None
    report = compare.compare_strict(rung.dtype, p, (ran.dinp, ran.dweight), name="q3_store")
    if not report.dinp.ok:
        return ("its value is not: every chunk of dinp is stored once, at its own address, but "
                f"dinp holds wrong numbers there (run on the CPU twin at {N}x{C}): store the "
                "eight new dinp values v4 computed in that step, the ones the question names"), None
    return None, None


def check_streaming_store(line) -> Verdict:
    """Q3: one line of CUDA that stores v4's eight new dinp values (``d``, an x128, at ``dinp_row +
    c``) with a streaming store (evict first), in place of ``store128cg(dinp_row + c, d);``.
    Compiled into kernels/v4_vec_bf16.cu and judged by its SASS: one 128-bit store, evict-first
    (``STG.E.EF.128``); then run on the CPU twin (:func:`store_on_twin`), which judges its address
    and its value (every chunk of dinp stored once, aligned, with the reference's numbers)."""
    if line is None or line is Ellipsis:
        return failed("replace None with your line of CUDA, as a string")
    if not isinstance(line, str) or not line.strip():
        return failed(f"give the line as a string of CUDA, got {line!r}")
    if ("\n" in line.strip() or not line.strip().endswith(";")
            or ";" in line.strip()[:-1]):
        return failed("give one statement on one line, ending with ';' (it replaces "
                      f"{STORE_LINE!r})")
    if build.find_nvcc() is None:
        return not_verified("no nvcc here to compile your line into v4")
    found, errors = store_opcodes(line.strip())
    if found is None:
        hint = (" (__stcs takes an int4 or float4 pointer and value: a Packed128 is neither; "
                "common.cuh wraps it for x128)" if re.search(r"\b__stcs\s*\(", line) else "")
        return failed(f"nvcc does not accept it{hint}:\n  {errors}")
    if found == ["STG.E.EF.128"]:
        wrong, why_not = store_on_twin(line.strip())
        if wrong:
            return failed("the store instruction is right (STG.E.EF.128, evict first), but "
                          + wrong)
        checked = (f"; its address and value were not checked ({why_not})" if why_not is not None
                   else "; run on the CPU twin at " + STORE_SHAPE_TEXT + ", it writes every chunk "
                   "of dinp once, at its own address, with the reference's values")
        return passed("one 128-bit store, evict first (STG.E.EF.128): __stcs, st.global.cs, "
                      "marks the line to leave the caches first" + checked + ". The Explore "
                      "tail times this variant of v4 against the shipped __stcg store")
    kinds = ", ".join(found) or "no 128-bit store"
    if found == ["STG.E.128"]:
        return failed(f"that compiles to {kinds}, a plain 128-bit store: it asks nothing of the "
                      "caches. Which of common.cuh's stores streams?")
    if found == ["STG.E.128.STRONG.GPU"]:
        return failed(f"that compiles to {kinds}: cache-global (st.global.cg, v4 as shipped), "
                      "kept in L2, not evict-first")
    return failed(f"that compiles to {kinds}: the dinp store should be one 128-bit store, evict "
                  "first (STG.E.EF.128)")
