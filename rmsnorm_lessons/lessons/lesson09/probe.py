"""Lesson 09's kernels as Nsight Compute profiles them: ``rl.nsight.profile(Probe("lesson09",
"scale_f128_x4", 2), N, C)`` runs :func:`launch` in a child under ncu.

The kernels are not rungs (``y = a * x``, :mod:`.inflight`), so the ladder cannot launch them: the
child calls :func:`launch` here, which launches the variant as :func:`.inflight.time_scale` does, on
N x C floats, ``launches`` times (ncu skips the first and profiles the second).
"""
from __future__ import annotations

import numpy as np

from ...core import build, gpu
from . import inflight


def launch(kernel: str, N: int, C: int, blocks_per_sm: int | None = None,
           launches: int = 2) -> None:
    """Launch scale variant ``kernel`` on N x C floats ``launches`` times (GPU): a grid of SMs x
    ``blocks_per_sm`` blocks of :data:`.inflight.BLOCK` threads, or one block per
    :data:`.inflight.BLOCK` x loads elements where ``blocks_per_sm`` is None (lesson 00's
    launch)."""
    width, loads = inflight.width_and_loads(kernel)
    n_floats = int(N) * int(C)
    if n_floats * 4 % width:
        raise ValueError(f"N x C floats must fill whole {width}-byte loads of {kernel}, got "
                         f"{N} x {C}")
    gpu.require()
    facts = gpu.facts()
    elements = n_floats * 4 // width
    if blocks_per_sm is None:
        grid = -(-elements // (inflight.BLOCK * loads))
    else:
        most = facts.max_threads_per_multiprocessor // inflight.BLOCK
        if isinstance(blocks_per_sm, bool) or not isinstance(blocks_per_sm, int) \
                or not 1 <= blocks_per_sm <= most:
            raise ValueError(f"blocks_per_sm must be an int 1..{most} or None, got "
                             f"{blocks_per_sm!r}")
        grid = facts.multiprocessors * blocks_per_sm
    function = build.source_module(inflight.KERNEL_FILE).get_function(kernel)
    drv = gpu.driver()
    x = drv.to_device(np.ones(n_floats, np.float32))
    y = drv.mem_alloc(n_floats * 4)
    try:
        for _ in range(launches):
            function(y, x, np.float32(2.5), np.int64(elements), block=(inflight.BLOCK, 1, 1),
                     grid=(grid, 1))
        gpu.synchronize()
    finally:
        x.free()
        y.free()
