"""Lesson 13 (finding bugs and bottlenecks): the kernel exercise, a fourth bug to find and fix.

The learner gets v3_smem with an early ``return`` for warps that have no row: in a block with fewer
rows than warps, those warps leave before the block's ``__syncthreads()`` and its flush, so the
channels they would flush never reach ``dweight``. The check is
:func:`rmsnorm_lessons.exercises.kernel_check.check_kernel` with v3_smem's plan, compute-sanitizer's
racecheck and synccheck included where it exists (``sanitize=False`` skips them).
"""
from __future__ import annotations

from . import Verdict

KERNEL = "rmsnorm_backward_v3"
HINTS = {
    "dweight wrong": "Which threads run the last loop, the block's flush? In a block with fewer "
                     "rows than warps, do all of its threads get there?",
    "dweight blocks": "Each channel of a block must be flushed once, by one thread of the block: "
                      "the flush loop strides by the block's threads, not by a warp's lanes",
}


def check_v3_fix(source: str, sanitize: bool = True) -> Verdict:
    """The learner's fixed ``rmsnorm_backward_v3``, checked as the rung ``yours_v3_fix`` with
    v3_smem's plan, and under compute-sanitizer's racecheck and synccheck
    (``sanitize=False`` skips them, for speed)."""
    from . import kernel_check as kc

    return kc.check_kernel(
        source, name="yours_v3_fix", like="v3_smem", sanitize_it=sanitize,
        hints=HINTS,
        static=(kc.sass_has("BAR",
                            "two barriers (BAR.SYNC): after zeroing, before the block's flush",
                            "keep both __syncthreads: one after zeroing dweight_shared, one before "
                            "the block's flush to dweight (removing a barrier trades this bug for "
                            "a race)", kernel=KERNEL,
                            at_least=2),
                kc.sass_has("ATOMS", "a shared-memory atomic (ATOMS) into dweight_shared",
                            "keep the shared-memory atomicAdd into dweight_shared", kernel=KERNEL),
                kc.no_local_memory(KERNEL)))
