"""Lesson 05's kernel exercise: v4's first draft (bf16 storage, fp32 arithmetic, 128-bit loads and
stores, v3's plan and shared-memory dweight), checked as the rung ``yours_v4`` with v4_vec_bf16's
plan and timed beside ``v4_interleaved``, the draft's layout as we built it. The cache hints and
where each channel lives in shared memory are lesson 06's: this check asks for neither."""
from __future__ import annotations

from ...core import ladder
from ...course.verdict import Verdict

KERNEL = "rmsnorm_backward_v4"
#: when dweight alone is wrong: where the loop adds a channel and where the flush reads it
SLOT_HINT = ("where dinp is right and dweight is not, follow one channel c: the loop adds its "
             "norm * dout into one slot of dweight_shared, and the flush must read the sum back "
             "from that same slot into dweight_accum[c]; add_dweight_v4 then adds "
             "dweight_accum[c] into dweight[c] once")


def only_wide_row_accesses(kernel: str = KERNEL):
    """Every LDG of ``kernel`` is 128 bits wide but one 32-bit load (``rstd[row]``), and every STG
    is 128 bits wide: a row tensor read or written narrower anywhere is NOT YET (counting the
    128-bit loads alone lets one narrowed load through the unrolled loops). Accesses after the
    last barrier are the flush's (dweight_accum, fp32), not a row's: a plain ``+=`` flush is the
    atomic check's to name."""
    from ...course.checking import static as ks

    def test(c):
        ins = c.instructions(kernel)
        barriers = ks._matching(ins, "BAR")
        if barriers:
            ins = [i for i in ins if i.offset < barriers[-1].offset]
        narrow_loads = [i.opcode for i in ks._matching(ins, "LDG") if ".128" not in i.opcode]
        narrow_stores = [i.opcode for i in ks._matching(ins, "STG") if ".128" not in i.opcode]
        if len(narrow_loads) <= 1 and not narrow_stores:
            return None
        found = ", ".join(sorted(set(narrow_loads[1:] + narrow_stores)))
        return (f"a row of dout, inp, weight or dinp is read or written narrower than 128 bits "
                f"({len(narrow_loads) - 1 + len(narrow_stores)} x {found} besides rstd's one "
                f"32-bit load): every row access goes through load128 / store128 (Packed128)")

    return ks.Static("no row access narrower than 128 bits (rstd's one 32-bit load aside)", test)


#: a load of dinp's old values, in any of common.cuh's or CUDA's forms
READS_DINP = r"\b(?:load128\w*|__ld\w+)\s*\([^;]*\bdinp\w*"


def reads_dinp():
    """The learner's text loads dinp before it stores it (dinp += ...): a kernel that only stores
    overwrites dinp, and nvcc, seeing the stored vector's old values unread, may split its store
    into narrow ones, which the width check would otherwise report as the cause."""
    import re

    from ...course.checking import static as ks

    def test(c):
        if re.search(READS_DINP, c.text):
            return None
        return ("dinp is never read: the update is dinp += ..., so load the 8 old values of dinp "
                "(a 128-bit load at dinp_row + c) before you add to them and store the sums; a "
                "kernel that only stores overwrites dinp")

    return ks.Static("dinp's old values loaded before the update (dinp +=)", test, sass=False)


def wide_accesses(kernel: str = KERNEL) -> tuple:
    """The static checks v4's two lessons share: v3's two barriers, the block's shared atomics and
    its flush's global ones, 128-bit loads and a 128-bit store of dinp in the main kernel, nothing
    narrower, no local memory."""
    from ...course.checking import kernel as kc

    return (reads_dinp(),
            kc.sass_has("BAR", "two barriers (BAR.SYNC): after zeroing, before the flush",
                        "a __syncthreads is missing: one after zeroing dweight_shared (no warp may "
                        "add before every entry is zero) and one before the flush (every warp "
                        "must have added its rows first)", kernel=kernel, at_least=2),
            kc.sass_has("ATOMS", "a shared-memory atomic (ATOMS) for the block's dweight",
                        "the block's warps add into the same shared sums at the same time: each "
                        "add is an atomicAdd on dweight_shared", kernel=kernel),
            kc.sass_has(kc.GLOBAL_ATOMICS, "a global atomic (REDG/ATOMG) for the block's flush",
                        "every block adds its C sums into the same dweight_accum: the flush is "
                        "an atomicAdd on global memory", kernel=kernel),
            kc.sass_has("LDG.128", "at least 7 128-bit loads (LDG.E.128) in the main kernel",
                        "load 8 bf16 values at once with a 128-bit load (load128, Packed128)",
                        kernel=kernel, at_least=7),
            kc.sass_has("STG.128", "a 128-bit store (STG.E.128) of dinp",
                        "store the 8 new dinp values with one 128-bit store, not one by one",
                        kernel=kernel),
            only_wide_row_accesses(kernel),
            kc.no_local_memory(kernel))


def check_v4_draft(source: str, sanitize: bool = True) -> Verdict:
    """Lesson 05's kernel exercise: the learner's ``rmsnorm_backward_v4`` (the row's dot product
    and update with 128-bit loads and stores, the block's flush into ``dweight_accum``) and
    ``add_dweight_v4``, checked as the rung ``yours_v4`` with v4_vec_bf16's plan, and timed beside
    ``v4_interleaved``. Any slot of ``dweight_shared`` a channel is added into passes, so long as
    the flush reads it from there. compute-sanitizer's race check runs by default;
    ``sanitize=False`` skips it, for speed."""
    from ...course.checking import kernel as kc

    ladder.v4_interleaved()  # the rung timed beside yours
    return kc.check_kernel(source, name="yours_v4", like="v4_vec_bf16",
                           compare_with=ladder.v4_vec_bf16.INTERLEAVED, sanitize_it=sanitize,
                           hints={"dweight wrong": SLOT_HINT}, static=wide_accesses())
