"""A room's progress: ``python -m rmsnorm_lessons progress [NOTEBOOK ...]``.

Each notebook (a learner's own copy) is executed in a temporary copy (nbclient; errors do not stop it, and
cells that need a GPU run where there is one and say why not where there is none), then every call of a
lesson's check (``lesson04.check_v3_kernel(...)``) gives one line, with the word its verdict starts with,
PASS, NOT YET or NOT VERIFIED, and every notebook a total. The learner's files are not modified.
"""
from __future__ import annotations

import re
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .exercises import STATES
from .student import check_calls

_VERDICT = re.compile(r"^(PASS|NOT YET|NOT VERIFIED): ?(.*)$", re.M)


@dataclass
class Result:
    lesson: str  # the notebook's stem, e.g. "04_shared_memory"
    exercise: str  # e.g. "lesson04.check_v3_kernel"
    status: str  # PASS, NOT YET or NOT VERIFIED
    message: str  # the verdict's first line, shortened

    def line(self, width: int = 36) -> str:
        return f"{self.lesson:<20} {self.exercise:<{width}} {self.status:<13} {self.message}"


def _text(outputs) -> tuple[str, str | None]:
    """The text a cell showed, and the error it raised (None if none)."""
    parts, error = [], None
    for out in outputs:
        kind = out.get("output_type")
        if kind == "stream":
            parts.append("".join(out.get("text", "")))
        elif kind in ("execute_result", "display_data"):
            parts.append("".join(out.get("data", {}).get("text/plain", "")))
        elif kind == "error":
            error = f"{out.get('ename')}: {out.get('evalue')}"
    return "\n".join(parts), error


def verdicts(nb: dict, lesson: str, width: int = 100) -> list[Result]:
    """One :class:`Result` per check call in an executed notebook (as a dict)."""
    results = []
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) else source
        calls = check_calls(source)
        if not calls:
            continue
        text, error = _text(cell.get("outputs", []))
        found = _VERDICT.findall(text)
        for k, (number, fn) in enumerate(calls):
            name = f"lesson{number}.{fn}"
            if k < len(found):
                status, message = found[k]
            else:
                status = "NOT YET"
                message = f"(no verdict: the cell raised {error})" if error else "(no verdict: the cell did not run)"
            message = message.strip()
            results.append(Result(lesson, name, status, message[:width - 3] + "..." if len(message) > width else message))
    return results


def execute(path: Path, timeout: int = 900) -> dict:
    """Run a copy of the notebook in a temporary folder (errors recorded, not raised); return it as a dict."""
    import nbformat
    from nbclient import NotebookClient

    with tempfile.TemporaryDirectory(prefix="rmsnorm-progress-") as tmp:
        copy = Path(tmp) / path.name
        shutil.copyfile(path, copy)
        nb = nbformat.read(copy, as_version=4)
        client = NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=True,
                                resources={"metadata": {"path": str(path.resolve().parent)}})
        client.execute()
    return nb


def totals(results: list[Result]) -> str:
    counts = {s: sum(r.status == s for r in results) for s in STATES}
    return ", ".join(f"{n} {s}" for s, n in counts.items()) + f" of {len(results)}"


def main(paths, out=None, timeout: int = 900) -> int:
    out = out or sys.stdout
    if not paths:
        from .student import default_notebooks

        paths = sorted(default_notebooks().glob("*.ipynb"))
    for p in paths:
        p = Path(p)
        try:
            nb = execute(p, timeout)
        except Exception as exc:  # a notebook that cannot run at all: say so, go on with the others
            print(f"{p.stem:<20} could not be run: {type(exc).__name__}: {str(exc)[:300]}", file=out)
            continue
        results = verdicts(nb, p.stem)
        for r in results:
            print(r.line(), file=out)
        print(f"{p.stem:<20} total: {totals(results)}" if results else f"{p.stem:<20} total: no exercises", file=out)
        out.flush()
    return 0
