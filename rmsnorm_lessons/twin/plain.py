"""Any kernel on the CPU twin, not only a rung: its text, one launch, NumPy arrays in and out.

    >>> out = run_kernel(text, "scale", grid=4, block=256, args=[("y", y), ("x", x), 2.0, n])
    >>> out.arrays["y"], out.hazards

Each array argument is copied into a buffer of its own (its name labels the reports: ``y[17]``)
and read back after the launch; numbers are passed as the kernel's parameter types say.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import compile, execute


@dataclass
class KernelRun:
    """The arrays after the last call, the hazards, the block orders, whether it was stopped."""

    arrays: dict = field(default_factory=dict)
    hazards: list = field(default_factory=list)
    orders: list = field(default_factory=list)
    stopped: bool = False


def run_kernel(source: str, kernel: str, *, grid: int, block: int, args, shared: int = 0,
               seed: int = 1, hazards: bool = True, calls: int = 1, name: str = "kernel",
               defines: dict | None = None, limit: float = execute.TIME_LIMIT) -> KernelRun:
    """Launch ``kernel`` of ``source`` (CUDA C) on ``grid`` x ``block`` threads with ``shared``
    bytes of dynamic shared memory. ``args``: the parameters in order, each ``(name, array)`` (a
    buffer) or a number. ``name`` labels the text's lines (``#line 1 "name"`` in front of the
    text makes them the text's own). Raises :class:`~.compile.NeedsGPU` or
    :class:`~.compile.TwinCompileError` before running anything the twin cannot take."""
    library = compile.library(source, name, (kernel,), defines=defines, hazards=hazards)
    buffers, cells, arrays = [], [], {}
    for k, arg in enumerate(args):
        if isinstance(arg, tuple):
            if len(arg) != 2 or not isinstance(arg[0], str):
                raise ValueError(f"args[{k}] must be (name, array) or a number, got {arg!r}")
            label, array = arg
            array = np.ascontiguousarray(array)
            arrays[label] = array
            buffers.append(execute.Buffer(label, max(array.nbytes, 1), array.itemsize,
                                          (array.tobytes(),) + (None,) * (calls - 1)))
            cells.append(("buffer", label))
        elif isinstance(arg, (int, float, np.integer, np.floating)) and not isinstance(arg, bool):
            cells.append(("value", arg.item() if isinstance(arg, np.generic) else arg))
        else:
            raise ValueError(f"args[{k}] must be (name, array) or a number, got {arg!r}")
    launch = dict(kernel=kernel, grid=grid, block=block, shared=shared, args=cells)
    execute._launch_dict(**launch)  # the same checks as a plan's launches
    ran = execute.run_program(library, buffers, [launch], calls=calls, seed=seed,
                              read=list(arrays), limit=limit)
    out = {label: np.frombuffer(ran.buffers[label], a.dtype).reshape(a.shape).copy()
           for label, a in arrays.items() if label in ran.buffers}
    return KernelRun(out, ran.hazards, ran.orders, ran.stopped)
