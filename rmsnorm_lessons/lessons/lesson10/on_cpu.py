"""Lesson 10's kernel exercise on the CPU twin: v7's register path alone.

The GPU check builds kernels/v7_fast.cu whole, with the learner's ``load_row`` and ``row_pass``
spliced in (:func:`.exercise.splice`). The twin refuses that text: it includes the staged and
cluster paths (cp.async, clusters, mbarrier, bulk copies) and has two lines of inline PTX. The
register path, the only path that calls the two steps, needs none of them, so the twin runs a build
of that path alone (:func:`twin_text`), made from the same spliced text by replacing four lines of
v7's own code, none of the learner's:

* the two ``#include`` lines of the staged and cluster paths go (nothing of the register path
  calls into them);
* ``named_barrier(id, threads)``'s ``barrier.sync`` becomes ``__syncthreads()``. That is the same
  barrier only where the named barrier's ``threads`` is the whole block, so the twin's plan
  (:func:`one_group_a_block`) gives each block one row group (blocks of G threads, as many blocks
  an SM as the 512-thread block held groups); a named barrier over part of a block stops the
  launch (a crash the twin reports), never a silent difference;
* ``opaque(v)``'s empty ``asm`` (it only keeps the compiler from holding widened values in
  registers; it emits no instruction) becomes nothing;
* ``__trap()`` (a K the plan never passes) becomes ``__builtin_trap()``.

What this build cannot show: a learner's access that strays into another row group's slice of
shared memory in the same block (here a block has one group), and every figure of speed. The GPU
run stays the judge; on the CPU the verdict says which build ran.
"""
from __future__ import annotations

from ...core.ladder import v7_fast
from ...course.checking.cpu import OnCpu
from ...twin import rungs

#: (v7_fast.cu's line, what the twin's build has instead): each must occur exactly once
REPLACED = (
    ('#include "v7_staged.cuh"\n', "\n"),
    ('#include "v7_wide.cuh"\n', "\n"),
    ('    asm volatile("barrier.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");\n',
     "    if (threads != (int)blockDim.x) __builtin_trap(); __syncthreads();  // 1 group\n"),
    ('    asm volatile("" : "+r"(v.x), "+r"(v.y), "+r"(v.z), "+r"(v.w));\n',
     "    (void)v;  // the twin has no register allocator to keep out\n"),
)
#: the twin's shapes: its usual ones (odd N, C a non-multiple of 32, one row, small C, a grid of 2
#: SMs where each block takes several rows) and one where the plan prefetches the next row
#: (accumulate mode, 1024 <= C <= 8192: weight read through weight4) with several rows a block
SHAPES = rungs.CHECK_SHAPES + ((67, 1032, 2),)
NOTE = ("The twin ran v7's register path alone (the two steps are called only there): "
        "kernels/v7_fast.cu without its staged and cluster paths, one row group a block, the "
        "group's named barrier a __syncthreads, opaque()'s empty asm left out; the GPU runs the "
        "whole file")


def twin_text(spliced: str) -> str:
    """The register path of ``spliced`` (v7_fast.cu with the learner's two steps in it) as the
    twin builds it: :data:`REPLACED`'s four changes and ``__trap()``, each in place, one line for
    one line (the twin names v7_fast.cu's lines as nvcc does). ValueError where v7_fast.cu no
    longer has one of the lines."""
    text = spliced
    for old, new in REPLACED:
        if text.count(old) != 1:
            raise ValueError(f"kernels/v7_fast.cu changed: the twin's build of its register path "
                             f"replaces {old.strip()!r}, found {text.count(old)} times "
                             "(rmsnorm_lessons/lessons/lesson10/on_cpu.py)")
        text = text.replace(old, new)
    if text.count("__trap();") == 0:
        raise ValueError("kernels/v7_fast.cu changed: no __trap(); where K is not planned")
    return text.replace("__trap();", "__builtin_trap();")


def one_group_a_block(N, C, device, *, block, overwrite=False, config=None):
    """v7_fast's register path at (N, C) in blocks of one row group each (``block`` ignored): the
    row layout, K, prefetch and the rows' order are the plan's; a block holds one group."""
    layout = v7_fast.row_layout(C, overwrite=overwrite)
    return v7_fast.plan(N, C, device, block=layout.group, overwrite=overwrite,
                        config=config or v7_fast.Config(staged=False))


def register_path_rung(rung):
    """The rung the twin runs for the learner's rung ``rung`` (unregistered, same name)."""
    from ...core import ladder

    return ladder.rung_from_source(name=rung.name, source=twin_text(rung.source), like=rung,
                                   adds=rung.adds, plan=one_group_a_block,
                                   kernels=("rmsnorm_backward_v7", "reduce_dweight_v7"),
                                   register_it=False)


ON_CPU = OnCpu(rung=register_path_rung, shapes=SHAPES, note=NOTE)
