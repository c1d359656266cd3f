"""Two profiles of the same shape side by side: what moved from one launch to the other
(:func:`diff`). Text only; the course draws the picture (``rl.plots.profile_diff``)."""
from __future__ import annotations

from dataclasses import dataclass

from .nsight_profile import Profile

#: stall reasons a diff lists per profile
TOP_STALLS = 3


def _num(value, spec: str, unit: str) -> str:
    return "n/a" if value is None else f"{format(value, spec)}{unit}"


def _delta(a, b, spec: str, unit: str) -> str:
    if a is None or b is None:
        return ""
    d = b - a
    return f"{'+' if d >= 0 else '-'}{format(abs(d), spec)}{unit}"


def _ratio(a, b) -> str:
    if a is None or b is None or a <= 0 or b <= 0:
        return ""
    return f"{b / a:.2f}x" if b >= a else f"{a / b:.2f}x fewer"


#: the rows of a diff: (what, how to read it off a profile, number format, unit, how the change
#: reads: "delta" (after - before, in the unit), "points" (a % against a %) or "ratio")
ROWS = (
    ("ncu duration", lambda p: p.duration_us, ".1f", " us", "delta"),
    ("DRAM throughput", lambda p: p.dram_pct, ".1f", " %", "points"),
    ("DRAM bytes / element", lambda p: p.per_element("dram_bytes"), ".2f", " B", "ratio"),
    ("achieved occupancy", lambda p: p.occupancy_pct, ".1f", " %", "points"),
    ("global load efficiency", lambda p: p.load_efficiency_pct, ".1f", " %", "points"),
    ("L2 atomic sectors / element", lambda p: p.atomic_sectors_per_element, ".3f", "", "delta"),
    ("bank conflicts / wavefront", lambda p: p.conflicts_per_wavefront, ".2f", "", "delta"),
)


def change_text(a, b, spec: str, unit: str, how: str) -> str:
    """How a figure moved from ``a`` to ``b`` ("" where either is missing)."""
    if how == "points":
        return _delta(a, b, spec, " points")
    if how == "ratio":
        return _ratio(a, b)
    return _delta(a, b, spec, unit)


def stall_lines(p: Profile, k: int = TOP_STALLS) -> list[str]:
    return [f"{r} {share:.0f} %" for r, _, share in p.top_stalls(k)]


@dataclass(frozen=True)
class ProfileDiff:
    """Two profiles of one shape: the figures that moved, row by row."""

    before: Profile
    after: Profile

    def rows(self) -> list[tuple[str, str, str, str]]:
        """``(what, before, after, change)``; the top stalls take one row per rank, the first named
        "top stalls" and the others ""."""
        out = []
        for what, get, spec, unit, how in ROWS:
            a, b = get(self.before), get(self.after)
            if a is None and b is None:
                continue
            out.append((what, _num(a, spec, unit), _num(b, spec, unit),
                        change_text(a, b, spec, unit, how)))
        left, right = stall_lines(self.before), stall_lines(self.after)
        for i in range(max(len(left), len(right))):
            out.append(("top stalls" if i == 0 else "", left[i] if i < len(left) else "",
                        right[i] if i < len(right) else "", ""))
        return out

    def __str__(self) -> str:
        return format_rows([("", self.before.version, self.after.version, "change")] + self.rows())


def format_rows(rows) -> str:
    """Rows of four columns, each as wide as its widest entry (at least 20), the last unpadded."""
    widths = [max(20, max(len(r[i]) for r in rows) + 1) for i in range(3)]
    return "\n".join(("".join(c.ljust(w) for c, w in zip(r[:3], widths)) + r[3]).rstrip()
                     for r in rows)


def diff(before: Profile, after: Profile) -> ProfileDiff:
    """What moved from ``before`` to ``after``: a ValueError naming both where their shapes (N x
    C) differ, since per-element figures and times are then not comparable."""
    for name, p in (("before", before), ("after", after)):
        if not isinstance(p, Profile):
            raise TypeError(f"{name} must be a Profile, got {type(p).__name__}")
    if tuple(before.shape) != tuple(after.shape):
        raise ValueError(f"diff needs one shape: before is {before.version} at "
                         f"{before.shape[0]}x{before.shape[1]}, after is {after.version} at "
                         f"{after.shape[0]}x{after.shape[1]}")
    return ProfileDiff(before, after)
