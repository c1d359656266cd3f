"""ncu's CSV, read: :func:`parse_csv` turns what ``ncu --csv`` prints (the raw page or the details
page) into one dict per profiled kernel. :mod:`rmsnorm_lessons.inspection.nsight` makes a profile of
it.
"""
from __future__ import annotations

import csv
import io


class ProfileError(RuntimeError):
    """ncu gave no profile; the message says why."""


def _number(text: str):
    t = (text or "").strip().replace(",", "")
    try:
        return float(t)
    except ValueError:
        return None


def _csv_lines(output: str) -> str:
    """The CSV part of ncu's stdout: lines starting with a double quote (``==PROF==`` lines and the
    program's own output dropped)."""
    return "\n".join(ln for ln in output.splitlines() if ln.startswith('"'))


def parse_csv(output: str) -> list[dict]:
    """One dict per profiled kernel: ``kernel`` (its name), ``metrics`` {metric name: float},
    ``units`` {metric name: unit}. Reads the raw page (``--page raw``: header of metric names, a row
    of units, a row per kernel) and the details page (``--page details``: one row per metric, with
    "Metric Name", "Metric Unit" and "Metric Value" columns)."""
    rows = list(csv.reader(io.StringIO(_csv_lines(output))))
    if not rows:
        return []
    header = rows[0]
    if "Metric Name" in header and "Metric Value" in header:  # the details page, long form
        col = {name: header.index(name) for name in ("Metric Name", "Metric Unit", "Metric Value")}
        ident = header.index("ID") if "ID" in header else None
        kernels: dict = {}
        for r in rows[1:]:
            if len(r) != len(header):
                continue
            key = r[ident] if ident is not None else r[header.index("Kernel Name")]
            k = kernels.setdefault(key, {"kernel": r[header.index("Kernel Name")], "metrics": {},
                                         "units": {}})
            k["metrics"][r[col["Metric Name"]]] = _number(r[col["Metric Value"]])
            k["units"][r[col["Metric Name"]]] = r[col["Metric Unit"]]
        return list(kernels.values())
    if "Kernel Name" not in header:
        raise ProfileError(f"ncu's CSV has no \"Kernel Name\" column: {header[:6]}")
    name_at = header.index("Kernel Name")
    units = {}
    out = []
    for r in rows[1:]:
        if len(r) != len(header):
            continue
        if not r[name_at]:  # the units row: no kernel name
            units = {h: u for h, u in zip(header, r) if "__" in h}
            continue
        metrics = {h: _number(v) for h, v in zip(header, r) if "__" in h}  # metric names hold "__"
        out.append({"kernel": r[name_at], "metrics": metrics, "units": units})
    return out
