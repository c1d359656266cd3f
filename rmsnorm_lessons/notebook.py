"""Notebook support: the ``%%gpu`` cell magic and a one-line status banner.

A cell that launches kernels starts with ``%%gpu`` (and carries the cell tag ``gpu``). Where a GPU works
the cell runs as usual; where not, it prints one sentence saying why and the notebook goes on.
"""
from __future__ import annotations

from . import gpu


def gpu_cell(line: str, cell: str):
    reason = gpu.why_unavailable()
    if reason is not None:
        print(f"Skipped (this cell launches kernels): {reason}")
        return None
    from IPython import get_ipython

    result = get_ipython().run_cell(cell)
    if not result.success:  # the traceback is already shown; fail the cell too, so nbval sees it
        raise GpuCellFailed("the %%gpu cell above raised an error")
    return None


class GpuCellFailed(RuntimeError):
    pass


def load_ipython_extension(ipython) -> None:
    ipython.register_magic_function(gpu_cell, magic_kind="cell", magic_name="gpu")


def setup() -> str:
    """Register ``%%gpu`` in the running IPython and return a one-line summary of what works here."""
    try:
        from IPython import get_ipython

        ip = get_ipython()
        if ip is not None:
            load_ipython_extension(ip)
    except ImportError:  # pragma: no cover
        pass
    reason = gpu.why_unavailable()
    if reason is None:
        f = gpu.facts()
        return f"GPU: {f.name} ({f.arch}, {f.multiprocessors} SMs): every cell of this lesson runs here."
    return f"No GPU here, so cells marked %%gpu will say so and skip. {reason}"
