"""The predictions of an executed notebook, for ``progress``: each one written or not, and its
measurement beside it where the measurement cell ran (:mod:`rmsnorm_lessons.course.predict` shows a
gap with its data under :data:`~rmsnorm_lessons.course.predict.GAP_MIME`; the guess cell's sentence
says what was written)."""
from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass

from ..course.predict import FIELDS, GAP_MIME, _pct

HEADLINE = re.compile(r"^(\d\d\.[a-z0-9_]+): (?:your guess beside the measurement \(prediction "
                      r"error (n/a|[\d.]+) %\)|measured; no guess was written)")
WRITTEN = re.compile(r"^Prediction (\d\d\.[a-z0-9_]+)(?:: (.*?)\. The measurement below| is not "
                     r"written yet)")
#: notebook.gpu_cell's line before the output another run saved (not this learner's)
SAVED = "Not run here ("
_GUESS_CALL = re.compile(r"(?:(\w+)\s*=\s*)?\bpredict\.guess\(\s*[\"'](\d\d\.[a-z0-9_]+)[\"']")
_VERSUS_CALL = re.compile(r"\bpredict\.versus\(\s*(?:[\"'](\d\d\.[a-z0-9_]+)[\"']|(\w+))")


@dataclass
class Seen:
    """One prediction as an executed notebook shows it: ``guessed`` what the prediction cell said
    ("" where no guess was written), ``gap`` the measurement cell's rows ("" where it did not run
    here), ``error`` its prediction error."""

    key: str
    written: bool = False
    guessed: str = ""
    gap: str = ""
    error: float | None = None
    measured: bool = False
    lesson: str = ""  # the notebook's stem, where progress ran it
    learner: str = ""

    @property
    def status(self) -> str:
        return "PREDICTED" if self.written else "NOT PREDICTED"

    @property
    def detail(self) -> str:
        if self.gap:
            return self.gap
        said = f"guess {self.guessed}" if self.written else "guess -"
        return f"{said} / measured - (not measured here)"

    def row(self) -> list:
        """What progress's worker sends: [lesson, key, status, error, detail]."""
        return [self.lesson, self.key, self.status, self.error, self.detail]

    @classmethod
    def from_row(cls, row, learner: str = "") -> "Seen":
        """The inverse of :meth:`row`; ValueError for a row that is not one (a forged reply)."""
        if not (isinstance(row, list) and len(row) == 5
                and all(isinstance(row[k], str) for k in (0, 1, 4))
                and row[2] in ("PREDICTED", "NOT PREDICTED")
                and (row[3] is None or type(row[3]) in (int, float) and 0 <= row[3] < math.inf)):
            raise ValueError(f"not a prediction's row: {row!r}")
        lesson, key, status, error, detail = row
        return cls(key, status == "PREDICTED", gap=detail, error=error, lesson=lesson,
                   learner=learner)

    def line(self, who: int = 12, width: int = 36) -> str:
        """progress's row: learner, lesson, predict.KEY, status, and per field its guess /
        measured / gap (the total line gives the median error)."""
        return (f"{self.learner:<{who}} {self.lesson:<20} {'predict.' + self.key:<{width}} "
                f"{self.status:<13} {self.detail}")


def total(seen_: list) -> str:
    """``"2 of 3 predictions written, median error 40 %"``."""
    errors = sorted(s.error for s in seen_ if s.error is not None)
    median = f", median error {_pct(statistics.median(errors))}" if errors else ""
    return f"{sum(s.written for s in seen_)} of {len(seen_)} predictions written{median}"


def _outputs(cell) -> tuple[str, list]:
    """The text this run showed (not a saved output of another, which :func:`.notebook.gpu_cell`
    shows after :data:`SAVED`), and the gaps' data (live, or this learner's :func:`.predict.replay`
    of a saved one)."""
    parts, gaps, saved = [], [], False
    for out in cell.get("outputs", []):
        data = out.get("data", {})
        if isinstance(data.get(GAP_MIME), dict):
            gaps.append(data[GAP_MIME])
        elif out.get("output_type") == "stream" and not saved:
            text = "".join(out.get("text", ""))
            saved = SAVED in text
            parts.append(text.split(SAVED)[0])
        elif out.get("output_type") in ("execute_result", "display_data") and not saved:
            parts.append("".join(data.get("text/plain", "")))
    return "\n".join(parts), gaps


def _gap_rows(lines: list[str]) -> str:
    rows = []
    for line in lines[1:]:  # lines[0] is the table's head
        cols = re.split(r"\s{2,}", line.strip(), maxsplit=3)
        if len(cols) == 4:
            rows.append(field_text(*cols))
    return "; ".join(rows)


def field_text(name, guess, measured, gap) -> str:
    """One field of a prediction as progress prints it: ``ms: guess 0.8 / measured 0.4 / gap 2.0x
    higher``."""
    return f"{name}: guess {'-' if guess is None else guess} / measured {measured} / gap {gap}"


def _from_data(found: dict, data: dict) -> None:
    key, error, rows = data.get("key"), data.get("error"), data.get("rows")
    if not isinstance(key, str) or not isinstance(rows, list):
        return
    s = found.setdefault(key, Seen(key))
    s.written, s.measured = data.get("status") == "PREDICTED", True
    s.error = float(error) if type(error) in (int, float) and 0 <= error < math.inf else None
    s.gap = "; ".join(field_text(*r) for r in rows if isinstance(r, list) and len(r) == 4)


def seen(nb: dict) -> list[Seen]:
    """Each prediction of an executed notebook (a dict), in the order of its first cell: the guess
    written or not, and, where its measurement cell ran here (or replayed a saved measurement), the
    gap."""
    found: dict = {}
    names: dict = {}
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        source = "".join(cell.get("source", ""))
        for var, key in _GUESS_CALL.findall(source):
            found.setdefault(key, Seen(key))
            names[var or key] = key
        for key, var in _VERSUS_CALL.findall(source):
            if key or var in names:
                found.setdefault(key or names[var], Seen(key or names[var]))
        text, gaps = _outputs(cell)
        lines = text.splitlines()
        for i, line in enumerate(lines):
            m = WRITTEN.match(line)
            if m:
                s = found.setdefault(m.group(1), Seen(m.group(1)))
                s.written, s.guessed = bool(m.group(2)), m.group(2) or ""
            m = HEADLINE.match(line)
            if m:  # a gap printed outside IPython
                s = found.setdefault(m.group(1), Seen(m.group(1)))
                table = [ln for ln in lines[i + 1:i + 2 + len(FIELDS)] if ln.startswith("  ")]
                s.gap, s.measured = _gap_rows(table), True
                s.written = m.group(2) is not None  # versus saw a written guess
                s.error = float(m.group(2)) / 100 if m.group(2) not in (None, "n/a") else None
        for data in gaps:
            _from_data(found, data)
    return list(found.values())
