"""What a GPU run measured, kept for the machines without one: ``results/<RUN>/openings.json``.

A lesson opens with the previous rung measured on the learner's GPU (:mod:`.investigate`). Where
there is no GPU or no ncu, it shows the same call as the course's GPU run measured it, labelled with
that card and date, read from here (never scraped from a notebook's outputs). The file holds one
entry per call, by kind (``"opening"``: :func:`.investigate.opening`'s calls; ``"ladder"``: lesson
13's whole ladder), each with the device and date that measured it and where it came from::

    {"format": 1, "run": "h100-2026-12-05",
     "opening": {"v2_warp 8192x1024": {"device": "NVIDIA H100 80GB HBM3", "date": "2026-12-05",
                                       "from": "...", "timing": {...}, "profile": {...},
                                       "extra": {}, "figures": {...}}}}

Writing: :func:`record` writes an entry only where :data:`ENV` is set, as the lessons' GPU run sets
it (``RMSNORM_SAVE_RUN=1`` writes into :data:`RUN`'s file; ``RMSNORM_SAVE_RUN=<run name>`` into
the results folder of that run, after which :data:`RUN` is set to that name). ``python
tools/save_openings.py`` measures every lesson's opening on a GPU and records it; its ``seed``
command wrote the first file from the H100 run of 2026-12-05 (its notebooks' text outputs).
"""
from __future__ import annotations

import datetime
import json
import os
import re
import tempfile
from pathlib import Path

#: the GPU run whose measurements the course shows where it cannot measure
RUN = "h100-2026-12-06"
#: set (to 1, or to a run's name) by the GPU run that re-executes the lessons: record() writes
ENV = "RMSNORM_SAVE_RUN"
FILE = "openings.json"
FORMAT = 1
KINDS = ("opening", "ladder")
RESULTS = Path(__file__).resolve().parents[2] / "results"
_RUN_NAME = re.compile(r"[a-z0-9][a-z0-9.-]*")


def path(run: str | None = None) -> Path:
    """``results/<run>/openings.json`` (default: :data:`RUN`)."""
    run = RUN if run is None else run
    if not isinstance(run, str) or not _RUN_NAME.fullmatch(run):
        raise ValueError(f"run must be a folder name of results/ (lower case, digits, - and .), "
                         f"got {run!r}")
    return RESULTS / run / FILE


def key(target, N: int, C: int, config=None) -> str:
    """The entry's name: ``"v2_warp 8192x1024"``, with the config's repr where there is one, and
    a probe as ``"lesson09:scale_f128_x4(2) 67108864x1"``."""
    name = getattr(target, "name", target)
    if hasattr(target, "lesson") and hasattr(target, "args"):  # a nsight.Probe
        name = f"{target.lesson}:{target.kernel}({', '.join(map(str, target.args))})"
    if not isinstance(name, str):
        raise TypeError(f"target must be a version name, a Rung or a Probe, got {target!r}")
    text = f"{name} {int(N)}x{int(C)}"
    return text if config is None else f"{text} {config!r}"


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")


def read(run: str | None = None) -> dict:
    """The whole file of ``run`` ({} where there is none)."""
    try:
        data = json.loads(path(run).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    if data.get("format") != FORMAT:
        raise ValueError(f"{path(run)} is format {data.get('format')!r}; this package reads "
                         f"format {FORMAT}")
    return data


def label(entry: dict) -> str:
    """``"NVIDIA H100 80GB HBM3, 2026-12-05"``: the card and date an entry was measured on."""
    return f"{entry.get('device', 'a GPU')}, {entry.get('date', 'date not recorded')}"


def load(kind: str, name: str, run: str | None = None):
    """``(data, "NVIDIA H100 80GB HBM3, 2026-12-05")`` saved for ``name`` (:func:`key`), or None
    where the run has no such entry."""
    _check_kind(kind)
    entry = read(run).get(kind, {}).get(name)
    return None if entry is None else (entry, label(entry))


def save_run() -> str | None:
    """The run :data:`ENV` asks :func:`record` to write (None: record nothing)."""
    value = os.environ.get(ENV, "").strip()
    if not value or value.lower() in ("0", "no", "false"):
        return None
    return RUN if value.lower() in ("1", "yes", "true") else value


#: the parts of an entry that name their figures one by one: a second measurement of the same call
#: in the same run (lesson 13's ladder after lessons 07 and 08) adds to them and never drops one
_NAMED = ("figures", "extra")


def _merged(old: dict | None, new: dict) -> dict:
    """``new``, keeping what ``old`` (the same call, measured earlier in the same run) named in
    :data:`_NAMED` and ``new`` does not: a lesson's extra figures survive another lesson's
    measurement of the same kernel at the same shape."""
    if not old:
        return new
    merged = dict(new)
    for part in _NAMED:
        if isinstance(old.get(part), dict) and old[part]:
            merged[part] = {**old[part], **(new.get(part) or {})}
    return merged


def record(kind: str, name: str, data: dict, *, device: str | None = None,
           date: str | None = None, source: str | None = None, run: str | None = None):
    """Write ``data`` as the entry ``name`` of ``kind`` (the device, the date and where it came
    from added) where :data:`ENV` is set, or ``run`` is given; return the file written, or None.
    The file is read and written under a lock: lessons executed side by side record into it."""
    _check_kind(kind)
    run = run or save_run()
    if run is None:
        return None
    if device is None:
        from ..core import gpu

        device = gpu.facts().name
    entry = dict(data, device=device, date=date or datetime.date.today().isoformat(),
                 **{"from": source or "measured by rmsnorm_lessons.course.investigate"})
    json.dumps(entry)  # a value JSON cannot hold says so here, before the file is touched
    target = path(run)
    target.parent.mkdir(parents=True, exist_ok=True)
    import fcntl  # the GPU run is on Linux; reading the file needs no lock

    lock_path = Path(tempfile.gettempdir()) / f"rmsnorm-lessons-{run}-{FILE}.lock"
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        whole = read(run) or {"format": FORMAT, "run": run}
        entries = whole.setdefault(kind, {})
        entries[name] = _merged(entries.get(name), entry)
        whole[kind] = dict(sorted(whole[kind].items()))
        partial = target.with_name(f".{FILE}.partial")
        partial.write_text(json.dumps(whole, indent=1, ensure_ascii=False) + "\n",
                           encoding="utf-8")
        partial.replace(target)
    return target
