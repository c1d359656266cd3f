"""A lesson's investigation: the last rung measured (:func:`opening`), and what moved once the
learner's change is in (:func:`what_changed`).

An :class:`Opening` is one call measured on this GPU: its bench time (``rl.bench.bench_version``,
20 repeats), Nsight Compute's profile of its main kernel (and of other kernels named), and figures
a lesson measures itself (an ablation, bits that differ between runs). It prints the figures
without their reading: the learner reads them first (:mod:`.diagnose`). Where there is no GPU or no
ncu it is the same call as the course's GPU run measured it (:mod:`.saved`), labelled with that
card and date, and says in one sentence why.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

from ..core import gpu, ladder
from ..inspection import nsight
from ..inspection.nsight_diff import change_text, format_rows, stall_lines
from ..inspection.nsight_profile import EXTRA, Profile
from ..speed.timing import Timing
from . import diagnose, saved

#: repeats of an opening's bench time
REPEATS = 20
#: stall reasons an opening lists
TOP_STALLS = 5
_COPY: dict = {}  # this process's copy bandwidth, measured once


@dataclass
class Opening:
    """One call of a rung (or a lesson's :class:`~rmsnorm_lessons.inspection.nsight.Probe`)
    measured: now on this GPU, or saved (``source`` says which)."""

    version: str
    shape: tuple
    config: object | None
    timing: Timing | None
    profile: Profile
    extra: dict = field(default_factory=dict)  # other kernels' profiles, by kernel name
    figures: dict = field(default_factory=dict)  # measurements that are not ncu's
    source: str = ""  # "measured now on <card>" or "saved on <card>, <date>"
    note: str | None = None  # why it is saved, in one sentence
    lacking: dict = field(default_factory=dict)  # figures asked for and not there: name -> why

    @property
    def measured_now(self) -> bool:
        return self.source.startswith("measured now")

    def figure(self, metric: str):
        """A figure by the names of :data:`.diagnose.METRICS` (None where not measured)."""
        return diagnose.figure(self, metric)

    def reading(self) -> str:
        """:func:`rmsnorm_lessons.inspection.nsight.reading` of the main profile: never printed by
        the opening itself (the learner reads the figures first)."""
        return nsight.reading(self.profile)

    def title(self) -> str:
        N, C = self.shape
        where = (f"{self.source}: run the cell on a GPU for yours"
                 if self.source.startswith("saved on") else self.source)
        config = f" ({self.config!r})" if self.config is not None else ""
        return f"{self.version}{config} at {N}x{C}, {where}"

    def rows(self) -> list[tuple[str, str]]:
        """(what, the figure as shown) in the order the lessons read them."""
        p, out = self.profile, []
        t = self.timing
        if t is not None:
            out.append(("bench time", f"{t.ms:.4f} ms, {t.gbps:.0f} GB/s, "
                                      f"{100 * t.fraction_of_copy:.1f} % of copy "
                                      f"({t.copy_gbps:.0f} GB/s)"))

        def row(what, value, text, name):
            out.append((what, text if value is not None else p.why_missing(name)))
        row("ncu duration", p.duration_us, f"{p.duration_us or 0:.1f} us", "duration_us")
        row("DRAM throughput", p.dram_pct, f"{p.dram_pct or 0:.1f} % of peak", "dram_pct")
        b = p.dram_bytes
        row("DRAM bytes", b, f"{(b or 0) / 1e6:.1f} MB, {p.per_element('dram_bytes') or 0:.2f} "
                             "B / element", "dram_bytes")
        row("achieved occupancy", p.occupancy_pct, f"{p.occupancy_pct or 0:.1f} %",
            "occupancy_pct")
        row("global load efficiency", p.load_efficiency_pct, f"{p.load_efficiency_pct or 0:.1f} %",
            "load_efficiency_pct")
        a = p.atomic_sectors_per_element
        row("L2 atomic sectors / element", a, f"{a or 0:.3f}", "atomic_sectors_per_element")
        c = p.conflicts_per_wavefront
        row("bank conflicts / wavefront", c, f"{c or 0:.2f}", "conflicts_per_wavefront")
        stalls = ", ".join(stall_lines(p, TOP_STALLS))
        if stalls and "unlisted" in p.stalls:
            stalls += " (the saved run listed three)"
        out.append(("warp stalls (share)", stalls or p.why_missing("dram_pct")))
        for kernel, q in self.extra.items():
            out.append((f"second kernel {kernel}", "ncu duration " + (
                f"{q.duration_us:.1f} us" if q.duration_us is not None else q.why_missing(
                    "duration_us"))))
        for name, value in self.figures.items():
            out.append(_figure_row(name, value, self.shape[1]))
        for name, why in self.lacking.items():  # asked for, not measured: the row says so
            out.append((_figure_row(name, 0.0, self.shape[1])[0], why))
        return out

    def __str__(self) -> str:
        lines = [self.title()] + ([self.note] if self.note else [])
        width = max(len(w) for w, _ in self.rows()) + 2
        lines += [f"{what:<{width}}{text}" for what, text in self.rows()]
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_pretty_(self, p, cycle):
        p.text(str(self))

    def as_dict(self) -> dict:
        """What :mod:`.saved` keeps of it (JSON-safe)."""
        t = None if self.timing is None else {**self.timing.as_dict()}
        if t is not None:
            t.pop("fraction_of_copy", None)
            t["ms_spread"] = None if math.isnan(t["ms_spread"]) else t["ms_spread"]
        return {"timing": t, "profile": self.profile.as_dict(),
                "extra": {k: q.as_dict() for k, q in self.extra.items()},
                "figures": dict(self.figures)}


def _figure_row(name: str, value: float, C: int) -> tuple[str, str]:
    """(label, value with its unit) of a figure a lesson measured itself."""
    if name.startswith("ablation:"):
        return f"without {name.split(':', 1)[1]}", f"{value:.1f} % of the time gone"
    if name.startswith("differing_channels"):
        what = "bf16 dweight" if name.endswith("_bf16") else "fp32 sums"
        return f"channels differing ({what})", f"{value:.0f} of {C} over repeated calls"
    if name == "second_kernel_us":
        return "second kernel", f"{value:.1f} us"
    return name, f"{value:.4g}"


def _timing(d: dict | None) -> Timing | None:
    if d is None:
        return None
    spread = d.get("ms_spread")
    return Timing(d["name"], d["N"], d["C"], d["ms"], math.nan if spread is None else spread,
                  d["bytes"], d["gbps"], d["copy_gbps"], d.get("burst", 1))


def _empty(target, N, C, why: str) -> Profile:
    names = [f.name for f in Profile.__dataclass_fields__.values()]
    missing = {n: why for n in names if n in EXTRA or n in ("dram_pct", "occupancy_pct",
                                                            "duration_us")}
    return Profile(getattr(target, "name", target), "", (N, C), None, None, None, {},
                   missing=missing)


def _name(target) -> str:
    return target if isinstance(target, str) else target.name


# --------------------------------------------------------------------------------------------------
# an opening: measured here, else the saved run's


def _copy_gbps() -> float:
    if "gbps" not in _COPY:
        _COPY["gbps"] = gpu.copy_bandwidth()
    return _COPY["gbps"]


def why_not_measured() -> str | None:
    """Why an opening cannot be measured here (no GPU, no ncu), or None."""
    reason = gpu.why_unavailable()
    if reason is not None:
        return reason.split(":")[0]
    return nsight.NOT_FOUND if nsight.find() is None else None


def _as_timing(got, name: str, N: int, C: int) -> Timing:
    """A :class:`Timing` of what a lesson's own timing returned (lesson 09's ScaleTiming)."""
    if isinstance(got, Timing):
        return got
    for attr in ("ms", "gbps", "copy_gbps"):
        if not isinstance(getattr(got, attr, None), (int, float)):
            raise TypeError(f"timing must return a Timing (or a record with ms, gbps and "
                            f"copy_gbps), got {type(got).__name__}")
    return Timing(name, N, C, got.ms, math.nan, int(round(got.gbps * got.ms * 1e6)), got.gbps,
                  got.copy_gbps)


def _arguments(target, kernels, figures, timing):
    if isinstance(kernels, str) or not all(isinstance(k, str) for k in kernels):
        raise TypeError(f"kernels must be a tuple of kernel names, got {kernels!r}")
    if isinstance(target, nsight.Probe):
        if kernels:
            raise ValueError("a probe has one kernel: kernels must be empty")
    else:
        wrong = [k for k in kernels if k not in target.kernels]
        if wrong:
            raise ValueError(f"kernels must be among {target.name}'s ({', '.join(target.kernels)}),"
                             f" got {', '.join(wrong)}")
    figures = dict(figures or {})
    for name, value in figures.items():
        if not isinstance(name, str) or not (callable(value) or isinstance(value, (int, float))):
            raise TypeError(f"figures must map names to numbers or functions that measure one, "
                            f"got {name!r}: {value!r}")
    if timing is not None and not callable(timing):
        raise TypeError(f"timing must be a function that times the call, got {timing!r}")
    return tuple(kernels), figures


def _measure(target, N, C, config, kernels, figures, timing) -> Opening:
    from ..speed import bench

    if timing is not None:
        t = _as_timing(timing(), _name(target), N, C)
    elif isinstance(target, nsight.Probe):
        t = None
    else:
        t = bench.bench_version(target, N, C, _copy_gbps(), repeats=REPEATS, config=config)
    profile = nsight.profile(target, N, C, config=config)
    extra = {k: nsight.profile(target, N, C, k, config=config) for k in kernels}
    figs = {name: float(f() if callable(f) else f) for name, f in figures.items()}
    return Opening(_name(target), (N, C), config, t, profile, extra, figs,
                   f"measured now on {gpu.facts().name}")


def _saved(target, N, C, config, kernels, figures, why: str) -> Opening:
    found = saved.load("opening", saved.key(target, N, C, config))
    note = f"Not measured here: {why}."
    if found is None:
        empty = _empty(target, N, C, "no saved run has this call")
        return Opening(_name(target), (N, C), config, None, empty,
                       {k: _empty(target, N, C, "no saved run has this call") for k in kernels},
                       {}, "not measured here, and no saved run has this call", note)
    data, label = found
    lacking = "not in the saved run"
    profile = (Profile.from_dict(data["profile"]) if data.get("profile")
               else _empty(target, N, C, lacking))
    extra = {k: Profile.from_dict(data["extra"][k]) if k in data.get("extra", {})
             else _empty(target, N, C, lacking) for k in kernels}
    figs = {n: v for n, v in data.get("figures", {}).items() if not figures or n in figures}
    lacking = {n: lacking for n in figures if n not in figs}
    return Opening(_name(target), (N, C), config, _timing(data.get("timing")), profile, extra,
                   figs, f"saved on {label}", note, lacking)


def opening(version, N: int, C: int, *, config=None, kernels=(), figures=None,
            timing=None) -> Opening:
    """The call ``version`` at (N, C) measured on this GPU: its bench time, Nsight Compute's
    profile of its main kernel and of ``kernels`` (others it launches), and ``figures`` (a name ->
    a number, or a function that measures it on the GPU, e.g. :func:`ablation`). ``version``: a
    rung's name, a Rung or a :class:`~rmsnorm_lessons.inspection.nsight.Probe` (whose time, if
    any, ``timing()`` returns). Without a GPU or ncu (or where ncu gives no profile) it is the
    saved run's measurement of the same call, saying why in one sentence; where
    ``RMSNORM_SAVE_RUN`` is set, what it measures is saved (:func:`.saved.record`)."""
    target = nsight.checked(version, N, C, config=config)
    kernels, figures = _arguments(target, kernels, figures, timing)
    N, C = int(N), int(C)
    why = why_not_measured()
    if why is None:
        try:
            measured = _measure(target, N, C, config, kernels, figures, timing)
        except nsight.ProfileError as exc:
            why = f"ncu gave no profile ({str(exc).rstrip('.')})"
        else:
            saved.record("opening", saved.key(target, N, C, config), measured.as_dict())
            return measured
    return _saved(target, N, C, config, kernels, figures, why)


def ablation(version, remove: str, N: int, C: int, repeats: int = REPEATS) -> Callable:
    """A figure for :func:`opening`: a function that times ``version`` whole and without the
    statement ``remove`` (``rl.bench.ablation``) and returns the % of the time gone (GPU)."""
    from ..speed import bench

    ladder.get(version)  # a wrong name says so now, not on the GPU

    def measure() -> float:
        whole = bench.bench_version(version, N, C, _copy_gbps(), repeats=repeats)
        rest = bench.ablation(version, remove, N, C, _copy_gbps(), repeats=repeats)
        return 100.0 * (1.0 - rest.ms / whole.ms)
    return measure


# --------------------------------------------------------------------------------------------------
# what changed from one rung to the next


def _time_change(a: Timing | None, b: Timing | None) -> str:
    if a is None or b is None:
        return ""
    return f"{b.ms / a.ms:.2f}x longer" if b.ms >= a.ms else f"{a.ms / b.ms:.2f}x shorter"


@dataclass
class Change:
    """Two openings of one shape side by side (:func:`what_changed`): the table and the picture
    (``figure``, drawn by ``rl.plots.profile_diff``)."""

    before: Opening
    after: Opening
    figure: object = None
    _shown: bool = field(default=False, repr=False)

    @property
    def diff(self):
        return nsight.diff(self.before.profile, self.after.profile)

    def header(self) -> str:
        a, b = self.before, self.after
        N, C = b.shape
        if a.source == b.source:
            where = (f"{b.source.removeprefix('measured now on ')}, measured now"
                     if b.measured_now else b.source)
        else:
            where = f"before: {a.source}; after: {b.source}"
        return f"what changed: {a.version} -> {b.version} at {N}x{C} ({where})"

    def rows(self) -> list[tuple[str, str, str, str]]:
        """(what, before, after, change): the bench time, the profiles' rows, the other kernels'
        durations and the figures both measured."""
        a, b = self.before, self.after
        ta, tb = a.timing, b.timing
        rows = [("bench time", f"{ta.ms:.4f} ms" if ta else "n/a",
                 f"{tb.ms:.4f} ms" if tb else "n/a", _time_change(ta, tb))]
        main = "ncu duration, main" if (a.extra or b.extra) else "ncu duration"
        rows += [(main if r[0] == "ncu duration" else r[0], *r[1:]) for r in self.diff.rows()]
        ka, kb = diagnose.figure(a, "second_kernel_us"), diagnose.figure(b, "second_kernel_us")
        if a.extra or b.extra:
            rows.append(("ncu duration, others", "n/a" if ka is None else f"{ka:.1f} us",
                         "n/a" if kb is None else f"{kb:.1f} us",
                         change_text(ka, kb, ".1f", " us", "delta")))
        for name in [n for n in a.figures if n in b.figures]:
            what, _ = _figure_row(name, a.figures[name], a.shape[1])
            rows.append((what, f"{a.figures[name]:.4g}", f"{b.figures[name]:.4g}",
                         change_text(a.figures[name], b.figures[name], ".4g", "", "delta")))
        return rows

    def __str__(self) -> str:
        head = ("", self.before.version, self.after.version, "change")
        return self.header() + "\n" + format_rows([head] + self.rows())

    def _ipython_display_(self):
        """The table, then the picture; once only where :func:`what_changed` just showed them."""
        if self._shown:
            self._shown = False
            return
        _show(self)


def _show(change: Change) -> None:
    print(change)
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:  # pragma: no cover
        return
    if get_ipython() is not None and change.figure is not None:
        display(change.figure)


def what_changed(before: Opening, after: Opening, *, show: bool = True) -> Change:
    """What moved from ``before`` to ``after`` (two openings of one shape, from the same run where
    both were measured now): prints the table (:class:`Change`) and draws the picture
    (``rl.plots.profile_diff``), unless ``show=False``; returns the :class:`Change`."""
    for name, o in (("before", before), ("after", after)):
        if not isinstance(o, Opening):
            raise TypeError(f"{name} must be an Opening (rl.investigate.opening), got "
                            f"{type(o).__name__}")
    if tuple(before.shape) != tuple(after.shape):
        raise ValueError(f"what_changed needs one shape: before is {before.version} at "
                         f"{before.shape[0]}x{before.shape[1]}, after is {after.version} at "
                         f"{after.shape[0]}x{after.shape[1]}")
    from . import plots

    change = Change(before, after)
    change.figure = plots.profile_diff(change)
    if show:
        _show(change)
        change._shown = True
    return change
