"""A lesson's diagnosis check, shared by the lessons that open with the last rung measured: the
learner's reading judged by :func:`rmsnorm_lessons.course.diagnose.check`.

An opening measured now shows every figure, and the check's verdict stands. A saved opening (no GPU
here) shows only what the course's GPU run measured: where the verdict needs a figure it lacks (the
DRAM throughput that decides the bound, the figure the learner names, one the cause's rule reads),
nothing can be judged, and the verdict says NOT VERIFIED and which figure is missing, never NOT YET
on a figure no row shows. What the saved opening does show is still judged: a bound against its
DRAM throughput, a figure that cannot show the cause, a value misread, a cause its figures refute
are NOT YET as on a GPU.
"""
from __future__ import annotations

from ..course.verdict import Verdict, failed, not_verified


def _bound_given(bound) -> bool:
    """A bound in a form the check accepts ("memory", "Latency-bound", ...)."""
    from ..course import diagnose

    if not isinstance(bound, str):
        return False
    word = bound.strip().lower().removesuffix("-bound").removesuffix(" bound").strip()
    return word in diagnose.BOUNDS


def _words(metric: str) -> tuple[str, str]:
    """The row's label of ``metric`` and what it counts, as ``rl.diagnose.causes()`` prints
    them."""
    from ..course import diagnose
    from ..inspection import nsight

    m, arg = diagnose.lookup(metric)
    arg = arg or ""
    return (m.label.replace("<reason>", arg).replace("<label>", arg),
            m.counts.replace("<waits>", nsight.WAITS_ON.get(arg, arg)).replace("<label>", arg))


def _cannot_show(cause: str, metric: str) -> str | None:
    """The NOT YET sentence where ``metric`` is no figure that can show ``cause`` (None where it
    is one): judged from the names alone, whatever the opening measured."""
    from ..course import diagnose

    if metric in diagnose.SHOWS[cause]:
        return None
    label, counts = _words(metric)
    note = diagnose.NOT_SHOWN.get((cause, metric))
    return (f"{label} counts {counts}: it does not show that {diagnose.CAUSES[cause]}"
            + (f" ({note})" if note else "") + f". {diagnose.HINTS[cause]}")


def _unseen(opening, missing: list[str]) -> Verdict:
    from ..course import diagnose

    missing = list(dict.fromkeys(missing))  # once each
    said = "; ".join(f"{_words(m)[0]} ({diagnose.why_missing(opening, m)})" for m in missing)
    return not_verified(f"this opening ({opening.source}) does not show {said}, and your reading "
                        f"needs {'it' if len(missing) == 1 else 'them'}: it cannot be judged "
                        "here, neither passed nor refused; run the opening on a GPU, where every "
                        "figure is measured")


def _wrong_bound(bound: str) -> Verdict:
    """A bound the opening's DRAM throughput refutes, said without that figure: the learner is
    sent back to the row, not given its value."""
    from ..course import diagnose

    word = bound.strip().lower()
    meaning = ("DRAM busy most of the launch" if word.startswith("memory")
               else "DRAM idle while warps wait")
    return failed(f"{'memory' if word.startswith('memory') else 'latency'}-bound means {meaning}; "
                  f"read the opening's row 'DRAM throughput' again and set it against the "
                  f"{diagnose.DRAM_BUSY_PCT:.0f} % line (lesson 02)")


def _misread(opening, metric: str, value: float) -> Verdict:
    """A figure misread, said without the figure: which row to read again (and which row the
    learner's number is, where it is another row's)."""
    from ..course import diagnose

    label = _words(metric)[0]
    said = (f"you read {metric} as {value:g}: that is not what the row '{label}' shows; read it "
            "again")
    for other in ("dram_pct", "occupancy_pct", "load_efficiency_pct", "time_ms"):
        there = diagnose.figure(opening, other)
        if other != metric and there is not None and abs(there - value) <= max(
                diagnose.METRICS[other].read_tolerance, 0.05 * abs(there)):
            said += f" ({value:g} is the row '{diagnose.METRICS[other].label}')"
            break
    return failed(said)


def judge(opening, *, bound, cause, metric, value, this_lesson: tuple[str, ...],
          rung: str) -> Verdict:
    """The learner's ``bound``, ``cause``, ``metric`` and ``value`` against ``opening``: the
    check's verdict, except NOT VERIFIED where a saved opening lacks a figure it needs, and a
    wrong bound or a misread figure said without the figure to read."""
    from ..course import diagnose
    from ..course.verdict import read_number

    args = dict(cause=cause, metric=metric, value=value, this_lesson=this_lesson, rung=rung)
    verdict = diagnose.check(opening, bound=bound, **args)
    if verdict.passed:
        return verdict
    try:
        diagnose.lookup(metric)
    except ValueError:
        return verdict  # not a figure's name: the check said so
    if not (isinstance(cause, str) and cause in diagnose.CAUSES and _bound_given(bound)):
        return verdict  # an answer not given, or not in the course's words: the check said which
    if value is None or value is Ellipsis:  # a solution reading a figure the saved run lacks
        lacks = diagnose.figure(opening, metric) is None and not opening.measured_now
        return _unseen(opening, [metric]) if lacks else verdict
    number, bad = read_number(value, "value")
    if bad is not None:
        return verdict
    dram, missing = opening.profile.dram_pct, []
    if dram is None and not opening.measured_now:  # no bound to read here: judge the rest
        missing.append("dram_pct")
        verdict = diagnose.check(opening, bound=diagnose.NOT_ASKED, **args)
    elif dram is not None:
        right = "memory" if dram >= diagnose.DRAM_BUSY_PCT else "latency"
        if not bound.strip().lower().startswith(right):
            return _wrong_bound(bound)
    shown = diagnose.figure(opening, metric)
    if shown is not None and abs(float(number) - shown) > max(
            diagnose.lookup(metric)[0].read_tolerance, 0.05 * abs(shown)):
        return _misread(opening, metric, float(number))
    if opening.measured_now:
        return verdict
    refuted = _cannot_show(cause, metric)
    if refuted is not None:
        return failed(refuted)
    if shown is None:
        return _unseen(opening, missing + [metric])
    # the course's own rule for the cause (None: a figure it reads is not in this opening)
    supported, _ = diagnose._support(cause, opening)
    if supported is False:
        return verdict
    if supported is None:
        missing += [m for m in sorted(diagnose.SHOWS[cause] | {"dram_pct", "time_ms"})
                    if diagnose.figure(opening, m) is None]
    return _unseen(opening, missing) if missing else verdict
