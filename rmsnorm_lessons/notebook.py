"""Notebook support: the ``%%gpu`` cell magic, a one-line status banner, and the record of verdicts.

A cell that launches kernels starts with ``%%gpu`` (and carries the cell tag ``gpu``). Where a GPU
works the cell runs as usual. Where not, it says so in one sentence and shows the output the same
cell made on the course's GPU, read from the notebook file itself (the lessons ship with the outputs
of an H200 run, and ``python -m rmsnorm_lessons.execute`` records in the notebook's metadata where
and when that run was), so the prose that follows still has its tables and figures beside it.

Where :data:`rmsnorm_lessons.verdicts.ENV` names a file (the workshop hub sets it), a cell whose
value is a check's verdict is recorded there (:mod:`rmsnorm_lessons.verdicts`) for the instructor's
dashboard.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from . import gpu

#: notebook metadata key where rmsnorm_lessons.execute records the device and date of the run
RUN_KEY = "rmsnorm_lessons"


def gpu_cell(line: str, cell: str):
    reason = gpu.why_unavailable()
    if reason is not None:
        saved = saved_outputs(cell)
        if saved is None:
            print(f"Skipped (this cell launches kernels): {reason}")
            return None
        outputs, where = saved
        print(f"Not run here ({reason.split(':')[0]}). Saved output from {where}:")
        show(outputs)
        return None
    from IPython import get_ipython

    result = get_ipython().run_cell(cell)
    if not result.success:  # the traceback is already shown; fail the cell too, so nbval sees it
        raise GpuCellFailed("the %%gpu cell above raised an error")
    return None


class GpuCellFailed(RuntimeError):
    pass


def _body(source: str) -> str:
    """A %%gpu cell's code without its magic line, for matching (trailing space ignored)."""
    lines = source.splitlines()
    if lines and lines[0].startswith("%%gpu"):
        lines = lines[1:]
    return "\n".join(line.rstrip() for line in lines).strip()


def _notebooks() -> list[Path]:
    # JupyterLab tells the kernel its notebook (JPY_SESSION_NAME); otherwise the kernel's folder
    # holds it
    named = os.environ.get("JPY_SESSION_NAME")
    found = [Path(named)] if named and named.endswith(".ipynb") and Path(named).is_file() else []
    return found + sorted(Path.cwd().glob("*.ipynb"))


def saved_outputs(cell: str, notebooks=None):
    """``(outputs, "NVIDIA H200, 2026-12-02")`` saved for the %%gpu cell with this code, or None.

    Looks in the running notebook's file (and the other notebooks of its folder) for a cell with the
    same code whose outputs came from a GPU run recorded in the notebook's metadata.
    """
    want = _body(cell)
    for path in notebooks if notebooks is not None else _notebooks():
        try:
            nb = json.loads(Path(path).read_text())
        except (OSError, ValueError):
            continue
        run = nb.get("metadata", {}).get(RUN_KEY)
        if not run:
            continue
        for c in nb.get("cells", []):
            if c.get("cell_type") != "code" or not c.get("outputs"):
                continue
            source = "".join(c.get("source", []))
            if source.startswith("%%gpu") and _body(source) == want:
                return c["outputs"], (f"{run.get('device', 'a GPU')}, "
                                      f"{run.get('date', 'date not recorded')}")
    return None


def show(outputs) -> None:
    """Display saved notebook outputs (streams, rich displays, results) in the running IPython."""
    from IPython.display import publish_display_data  # only inside IPython

    for out in outputs:
        kind = out.get("output_type")
        if kind == "stream":
            text = "".join(out.get("text", []))
            print(text, end="" if text.endswith("\n") else "\n")
        elif kind in ("display_data", "execute_result"):
            data = {k: "".join(v) if isinstance(v, list) else v for k,
                    v in out.get("data", {}).items()}
            publish_display_data(data, out.get("metadata", {}))
        elif kind == "error":
            print(f"{out.get('ename')}: {out.get('evalue')}")


def record_verdict(result) -> None:
    """IPython's ``post_run_cell`` hook: a cell whose value is a Verdict is recorded under the
    exercise its text calls. Never raises: a failed record must not turn a check's cell into an
    error."""
    try:
        from . import verdicts
        from .exercises import Verdict

        value = getattr(result, "result", None)
        if isinstance(value, Verdict) and verdicts.record_path() is not None:
            info = getattr(result, "info", None)
            verdicts.record_cell(getattr(info, "raw_cell", "") or "", value)
    except Exception:  # pragma: no cover - verdicts.record already swallows its own errors
        pass


def load_ipython_extension(ipython) -> None:
    ipython.register_magic_function(gpu_cell, magic_kind="cell", magic_name="gpu")
    hooks = ipython.events.callbacks.get("post_run_cell", [])
    if not any(getattr(h, "__name__", "") == record_verdict.__name__
               and getattr(h, "__module__", "") == __name__ for h in hooks):
        ipython.events.register("post_run_cell", record_verdict)


def setup() -> str:
    """Register ``%%gpu`` in the running IPython and return a one-line summary of what works
    here."""
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
        return (f"GPU: {f.name} ({f.arch}, {f.multiprocessors} SMs): every cell of this lesson "
                f"runs here.")
    return (f"No GPU here: cells marked %%gpu show the output they made on the course's GPU "
            f"instead of running. {reason}")
