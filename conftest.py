"""GPU tests (marker ``gpu``) and notebook cells tagged ``gpu`` run only where a CUDA device works.

Also: strict nbval normalises machine numbers with ``nbval_sanitize.cfg`` unless another file is given
(``pytest --nbval notebooks`` as well as ``make test``), and the summary says in one line how many GPU
items were skipped and why, instead of one line per file (the other skip reasons are grouped by reason).

Notebook runs (nbval) import the package from this checkout: nbval starts each kernel with the
notebook's folder as its working directory, so a relative entry in PYTHONPATH (``PYTHONPATH=.
pytest --nbval notebooks``) would point into ``notebooks/``; every entry is made absolute and the
repository root put first (with the package installed, as by ``make test``, this changes nothing).
This lives here, not in a conftest.py of the lessons' folder, so that it holds lessons only.

``RMSNORM_FAILURE_LOG=FILE`` appends each failure's report to FILE as it happens, not at the end of the
session: a run stopped by a time limit (tools/refresh-on-gpu.sh on a lent GPU) still says why tests failed.
"""
import os
from collections import Counter
from pathlib import Path

import pytest


from rmsnorm_lessons.core import gpu

ROOT = Path(__file__).resolve().parent
SANITIZE = ROOT / "nbval_sanitize.cfg"
GPU_TEST = "needs a GPU: "
GPU_CELL = "notebook cell tagged gpu: no GPU here"
_XDIST_WORKER = False  # this process is an xdist worker: its reports reach the controller, which logs them


def _root_on_pythonpath() -> None:
    entries = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    parts = [str(Path(p).resolve()) for p in entries if p]
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in parts if p != str(ROOT)])


def pytest_configure(config):
    global _XDIST_WORKER
    # xdist gives its workers `workerinput`; the environment's PYTEST_XDIST_WORKER would also be inherited
    # by a pytest that a test starts in a subprocess, which is no worker
    _XDIST_WORKER = hasattr(config, "workerinput")
    # the mutation suite's score line in the terminal summary (tests/test_mutations.py); a copy of
    # this file run elsewhere (tests/test_failure_log.py) has no tests package beside it
    try:
        from tests import _mutation_report
    except ImportError:
        _mutation_report = None
    if _mutation_report is not None and not config.pluginmanager.is_registered(_mutation_report):
        config.pluginmanager.register(_mutation_report, "mutation-report")
    # nbval's option exists only where nbval is installed; an explicit --nbval-sanitize-with wins
    option = config.option
    if getattr(option, "nbval", False) or getattr(option, "nbval_lax", False):
        _root_on_pythonpath()
    if hasattr(option, "nbval_sanitize_with") and not option.nbval_sanitize_with \
            and not getattr(option, "sanitize_with", None) and SANITIZE.is_file():
        option.nbval_sanitize_with = str(SANITIZE)


def pytest_collection_modifyitems(config, items):
    reason = gpu.why_unavailable()
    if reason is None:
        return
    skip_test = pytest.mark.skip(reason=f"{GPU_TEST}{reason}")
    skip_cell = pytest.mark.skip(reason=GPU_CELL)
    for item in items:
        cell = getattr(item, "cell", None)
        if cell is not None:
            if "gpu" in cell.get("metadata", {}).get("tags", []):
                item.add_marker(skip_cell)
        elif "gpu" in item.keywords:
            item.add_marker(skip_test)


def pytest_runtest_logreport(report):
    path = os.environ.get("RMSNORM_FAILURE_LOG")
    if path and report.failed and not _XDIST_WORKER:
        with open(path, "a") as f:
            f.write(f"=== {report.nodeid} ({report.when})\n{report.longreprtext}\n\n")


def _skip_reason(report) -> str:
    longrepr = report.longrepr
    text = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return text.removeprefix("Skipped: ")


def pytest_terminal_summary(terminalreporter):
    skipped = [r for r in terminalreporter.stats.get("skipped", []) if getattr(r, "skipped", False)]
    if not skipped:
        return
    reasons = Counter(_skip_reason(r) for r in skipped)
    tests = sum(n for why, n in reasons.items() if why.startswith(GPU_TEST))
    cells = reasons.pop(GPU_CELL, 0)
    why = gpu.why_unavailable() or "no GPU"
    for key in [k for k in reasons if k.startswith(GPU_TEST)]:
        del reasons[key]
    parts = [f"{n} {what}" for n, what in ((tests, "GPU tests"), (cells, "gpu-tagged notebook cells")) if n]
    if parts:
        terminalreporter.write_line(f"skipped {' and '.join(parts)}: {why}")
    for text, n in reasons.most_common():
        terminalreporter.write_line(f"skipped {n}: {text}")
