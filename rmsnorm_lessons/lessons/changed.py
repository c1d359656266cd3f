"""The last line of a lesson's what-changed cell: the learner's guess (``rl.predict.guess``) set
beside the two openings' bench times, the speedup (before's time over after's) and after's share of
the copy bandwidth. Both openings come from one run (this GPU's, or the saved run's without one);
where an opening has no time (a saved run that did not time that call), the guess waits, and the
cell says so instead of comparing it with a number nobody measured."""
from __future__ import annotations

FIELDS = ("speedup", "pct_of_copy")


def guess_beside(mine, before, after, *, why: str, fields=FIELDS):
    """``rl.predict.versus(mine, ...)`` with ``fields`` measured from the openings ``before`` and
    ``after``; None (and one sentence) where either has no bench time."""
    from ..course import predict

    unknown = [f for f in fields if f not in FIELDS]
    if unknown or not fields:
        raise ValueError(f"fields must be among {', '.join(FIELDS)}, got {fields!r}")
    missing = [o for o in (before, after) if getattr(o, "timing", None) is None]
    if missing:
        names = " and ".join(f"{o.version} ({o.source})" for o in missing)
        print(f"Your guess waits for a measurement: no bench time for {names}. Run this cell on a "
              "GPU to set it beside yours.")
        return None
    measured = {"speedup": before.timing.ms / after.timing.ms,
                "pct_of_copy": 100 * after.timing.fraction_of_copy}
    return predict.versus(mine, why=why, **{f: measured[f] for f in fields})
