"""A rung's profile as the lessons show it: :func:`bottleneck` profiles one launch with Nsight
Compute (:mod:`rmsnorm_lessons.inspection.nsight`) and reads it in one line; where it cannot (no
GPU, no ncu, no permission) it says why and shows what the same call measured on the GPU run the
lesson was saved from (its card and date)."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from ..core import gpu
from ..inspection import nsight
from . import notebook, registry


#: how :func:`rmsnorm_lessons.inspection.nsight.reading`'s line starts
READING_STARTS = ("memory-bound", "latency-bound", "no reading")


@dataclass(repr=False)
class Bottleneck:
    """What :func:`bottleneck` found: the profile and its reading, or why there is none (and the
    saved output of the same call, ``(text, "NVIDIA H200, 2026-12-04")``, where a lesson has one).
    IPython shows :meth:`__str__`."""

    version: str
    shape: tuple
    profile: nsight.Profile | None = None
    why_not: str | None = None
    saved: tuple | None = None
    reading: str | None = None
    #: False: the table without its reading line (an opening, where the learner reads it first)
    show_reading: bool = True

    def __post_init__(self):
        if self.profile is not None and self.reading is None:
            self.reading = nsight.reading(self.profile)

    def __str__(self) -> str:
        if self.profile is not None:
            table = nsight.table([self.profile])
            return f"{table}\n{self.reading}" if self.show_reading else table
        why = (self.why_not or "ncu gave no result").rstrip(". ")
        if self.saved is None:
            return (f"Not profiled here: {why}; the saved output of this cell (the H200's) shows "
                    "what ncu measured there.")
        text, where = self.saved
        if not self.show_reading:  # the saved run's reading line stays unread too
            text = "\n".join(line for line in text.splitlines()
                             if not line.startswith(READING_STARTS))
        return (f"Not profiled here: {why}; the saved output of this call on {where} shows what "
                f"ncu measured there:\n{text.rstrip()}")

    __repr__ = __str__

    def _repr_pretty_(self, p, cycle):
        p.text(str(self))


def _call(version: str, N: int, C: int):
    return re.compile(r"bottleneck\(\s*[\"']" + re.escape(version) + r"[\"']\s*,\s*"
                      + str(N) + r"\s*,\s*" + str(C) + r"\s*[,)]")


def saved_output(version: str, N: int, C: int, notebooks=None):
    """``(text, "NVIDIA H200, 2026-12-04")``: what a ``%%gpu`` cell calling ``bottleneck(version,
    N, C)`` showed on the GPU run a notebook records (the running notebook's folder, then the
    lessons), or None."""
    if notebooks is None:
        notebooks = notebook._notebooks() + [lesson.path for lesson in registry.LESSONS]
    call = _call(version, N, C)
    for path in dict.fromkeys(Path(p) for p in notebooks):
        try:
            nb = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        run = nb.get("metadata", {}).get(notebook.RUN_KEY)
        for cell in nb.get("cells", []) if run else []:
            source = "".join(cell.get("source", []))
            if cell.get("cell_type") == "code" and source.startswith("%%gpu") \
                    and call.search(source):
                texts = ["".join(o.get("text") or o.get("data", {}).get("text/plain", ""))
                         for o in cell.get("outputs", [])]
                text = "\n".join(t.rstrip("\n") for t in texts if t.strip())
                if text:
                    return text, f"{run.get('device', 'a GPU')}, {run.get('date', 'no date')}"
    return None


def bottleneck(version: str, N: int, C: int, kernel: str | None = None, *,
               show_reading: bool = True) -> Bottleneck:
    """Profile one launch of ``version`` at (N, C) with ncu and read it (:func:`reading`).

    Arguments are checked first (:func:`checked`); a wrong one raises. Where ncu is missing, may not
    read the counters (ERR_NVGPUCTRPERM), there is no GPU or ncu gives no result, it does not raise:
    the :class:`Bottleneck` says why in one sentence and carries the saved output of the same call.
    """
    nsight.checked(version, N, C, kernel)
    N, C = int(N), int(C)
    why = None
    if nsight.find() is None:
        why = nsight.NOT_FOUND
    else:
        reason = gpu.why_unavailable()
        why = reason.split(":")[0] if reason else None
    if why is None:
        try:
            return Bottleneck(version, (N, C), nsight.profile(version, N, C, kernel),
                              show_reading=show_reading)
        except nsight.ProfileError as exc:
            why = str(exc)
    return Bottleneck(version, (N, C), why_not=why, saved=saved_output(version, N, C),
                      show_reading=show_reading)
