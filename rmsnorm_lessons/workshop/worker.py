"""The child process of ``progress``:
``python -m rmsnorm_lessons.workshop.worker NOTEBOOK SECONDS``.

It runs one notebook, and its kernel, as whoever it was started as (``progress`` starts it as the
learner), and prints one line: ``rmsnorm-progress-reply `` and JSON with the verdicts, the
predictions (:func:`.progress_predictions.seen`), the uid it ran as and, where the run did not get
to the end, why. The notebook is read, executed in memory (nbclient; errors recorded, not raised)
and never written.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

from .predictions import seen
from .progress import INSTALL, NEEDS, REPLY, missing, verdicts


def _kernelspec(folder: Path) -> None:
    """A ``python3`` kernel of this interpreter, found first on JUPYTER_PATH: the notebook runs
    where its checks were installed, whatever kernels the account has of its own."""
    spec = folder / "kernels" / "python3"
    spec.mkdir(parents=True)
    spec.joinpath("kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (ipykernel)", "language": "python"}))


def run(path: str, timeout: int) -> dict:
    """The verdicts of one notebook run in this process's account, or why there are none."""
    reply = {"uid": os.getuid(), "results": [], "predictions": []}
    absent = [name for name in NEEDS if missing(name)]
    if absent:
        reply["error"] = f"{', '.join(absent)} missing for {sys.executable}: {INSTALL}"
        return reply
    import nbformat
    from nbclient import NotebookClient

    path = Path(path)
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception as exc:  # not JSON, not a notebook, not readable: say which
        reply["error"] = f"could not read the notebook: {type(exc).__name__}: {str(exc)[:200]}"
        return reply
    with tempfile.TemporaryDirectory(prefix="rmsnorm-progress-") as tmp:
        _kernelspec(Path(tmp) / "share")
        os.environ["JUPYTER_PATH"] = str(Path(tmp) / "share")
        os.environ["JUPYTER_RUNTIME_DIR"] = str(Path(tmp) / "runtime")
        client = NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=True,
                                resources={"metadata": {"path": str(path.parent)}})
        try:
            client.execute()
        except Exception as exc:  # a cell past its time, a dead kernel: the verdicts so far count
            first = (str(exc).strip().splitlines() or [""])[0]
            reply["error"] = f"{type(exc).__name__}: {first[:200]}"
    reply["results"] = [[r.lesson, r.exercise, r.status, r.message]
                        for r in verdicts(nb, path.stem)]
    for found in seen(nb):
        found.lesson = path.stem
        reply["predictions"].append(found.row())
    return reply


if __name__ == "__main__":
    print(REPLY + json.dumps(run(sys.argv[1], int(sys.argv[2]))), flush=True)
