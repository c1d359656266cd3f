"""A diagnosis, judged: the learner names what bounds the last rung, the cause, the figure of its
opening that shows it and that figure's value; :func:`check` judges each against the opening's own
measurement (:class:`rmsnorm_lessons.course.investigate.Opening`) and says why.

The words: :data:`CAUSES` (ten causes, a sentence each), :data:`METRICS` (the figures an opening
shows, by name), :data:`SHOWS` (which figures can show which cause) and :data:`SUPPORT` (when an
opening supports a cause: thresholds named below, each with its reason). :func:`causes` prints the
words without the answers. A learner is judged against their own GPU's profile, else the saved
run's (whose figures it says), NOT VERIFIED where that lacks the figure a verdict needs; a message
names the row to read again, never the figure the learner must read.
"""
from __future__ import annotations

import textwrap
from dataclasses import dataclass
from typing import Callable

from ..inspection import nsight
from .verdict import Verdict, failed, not_verified, passed, read_number

#: "this lesson does not ask for it" (lesson 02 asks for the bound and the figure, no cause)
NOT_ASKED = type("NotAsked", (), {"__repr__": lambda self: "NOT_ASKED"})()
BOUNDS = ("memory", "latency")

CAUSES = {
    "dram_bandwidth": "DRAM is busy most of the launch: only moving fewer bytes helps",
    "storage_width": "a value takes more bytes than it needs",
    "few_loads_in_flight": "warps wait for their loads while DRAM idles",
    "uncoalesced": "a load fetches bytes it does not use",
    "few_threads": "too few warps are resident to hide the wait",
    "global_atomics": "L2 applies one address's updates one at a time",
    "bank_conflicts": "shared-memory accesses are replayed bank by bank",
    "barriers": "warps wait for each other at barriers",
    "order_of_additions": "the sum depends on which add came first",
    "second_launch": "a second kernel, and the gap before it, add to the call",
}

# --- thresholds: when an opening supports a cause (each with its reason) ------------------------
#: DRAM % from which DRAM is the limit: Nsight Compute's own line (nsight.MEMORY_BOUND_PCT)
DRAM_BUSY_PCT = nsight.MEMORY_BOUND_PCT
#: DRAM bytes per element: the fp32 rungs move 16 (dout, inp and dinp read, dinp written, 4 B
#: each), the bf16 ones 8; 12 lies between
WIDE_BYTES_PER_ELEMENT = 12.0
#: global load efficiency at or below which loads waste most of each sector: a coalesced fp32
#: load uses all 32 bytes of its sectors (100 %), v1's lanes 4 bytes of each (12.5 %)
UNCOALESCED_PCT = 50.0
#: achieved occupancy at or below which too few warps are there to hide a load: a quarter of the
#: warp slots (v1: 12 % on the H100 of 2026-12-05; v3's plan, 4 blocks of 8 warps, allows 50 %)
FEW_WARPS_PCT = 25.0
#: L2 atomic sectors per element from which the atomics are one per element or so: v2 sends 4
#: sectors per warp's 32 adds (0.125), v1 at least one per 32 (0.031); v3 one flush per block and
#: channel, blocks x C / 8 sectors over N x C (0.008 at 8192x1024 with 528 blocks)
ATOMIC_SECTORS_PER_ELEMENT = 0.02
#: % of the time gone without the atomicAdd from which the atomics bound the call (v2 on the
#: H100 of 2026-12-05: 72 %); below it, other costs are as large
ATOMIC_ABLATION_PCT = 30.0
#: bank conflicts per conflict-free wavefront: 1 is a two-way conflict on average
CONFLICTS_PER_WAVEFRONT = 1.0
#: short_scoreboard + mio_throttle, % of stalls, from which warps wait on shared memory (v4's
#: conflict-free layout: 9 % on the H100 of 2026-12-05)
SHARED_STALLS_PCT = 25.0
#: barrier stalls, % of stalls, from which warps wait for each other (v5, v6: 34-35 %; v3: 5 %)
BARRIER_PCT = 20.0
#: the second kernel's ncu duration, % of the call's bench time, from which it is worth removing
SECOND_KERNEL_PCT = 5.0


@dataclass(frozen=True)
class Metric:
    """A figure of an opening: its row's label, unit, how to read it (``getter(opening, arg)``,
    None where the opening lacks it), the absolute slack of a reading (the tolerance is the larger
    of it and 5 % of the figure) and what it counts."""

    label: str
    unit: str
    getter: Callable
    read_tolerance: float
    counts: str


def _p(name):
    return lambda o, arg: getattr(o.profile, name)


def _second_kernel(o, arg):
    if "second_kernel_us" in o.figures:
        return o.figures["second_kernel_us"]
    times = [p.duration_us for p in o.extra.values()]
    return sum(times) if times and None not in times else None


METRICS = {
    "dram_pct": Metric("DRAM throughput", "% of peak", _p("dram_pct"), 0.5,
                       "how busy DRAM was over the launch, % of its peak"),
    "dram_bytes_per_element": Metric("DRAM bytes / element", "B",
                                     lambda o, a: o.profile.per_element("dram_bytes"), 0.5,
                                     "the bytes DRAM read and wrote, per element of N x C"),
    "occupancy_pct": Metric("achieved occupancy", "%", _p("occupancy_pct"), 0.5,
                            "the share of the SMs' warp slots that held a warp, on average"),
    "load_efficiency_pct": Metric("global load efficiency", "%", _p("load_efficiency_pct"), 0.5,
                                  "the share of each fetched 32-byte sector a global load used"),
    "red_sectors_per_element": Metric("L2 atomic sectors / element", "",
                                      _p("atomic_sectors_per_element"), 0.005,
                                      "the 32-byte sectors L2 updated for global atomics, per "
                                      "element"),
    "bank_conflicts_per_wavefront": Metric("bank conflicts / wavefront", "",
                                           _p("conflicts_per_wavefront"), 0.05,
                                           "the extra shared-memory passes per conflict-free one "
                                           "(0: none; an 8-way conflict: 7)"),
    "stall:<reason>": Metric("<reason> stalls", "% of stalls",
                             lambda o, reason: o.profile.stall_share(reason), 0.5,
                             "the share of the warps' stalls spent waiting on <waits>"),
    "ablation:<label>": Metric("without <label>", "% of the time",
                               lambda o, label: o.figures.get(f"ablation:{label}"), 1.0,
                               "the share of the call's time gone when <label> is taken out"),
    "differing_channels": Metric("channels differing over repeated calls", "of C",
                                 lambda o, a: o.figures.get("differing_channels"), 0.5,
                                 "the channels whose sum differs in some bit between identical "
                                 "calls"),
    "second_kernel_us": Metric("second kernel", "us", _second_kernel, 0.5,
                               "ncu's duration of the call's other kernel"),
    "time_ms": Metric("bench time", "ms", lambda o, a: o.timing.ms if o.timing else None, 0.0005,
                      "the call's median time"),
}

SHOWS = {
    "dram_bandwidth": {"dram_pct"},
    "storage_width": {"dram_bytes_per_element"},
    "few_loads_in_flight": {"stall:long_scoreboard", "dram_pct", "occupancy_pct"},
    "uncoalesced": {"load_efficiency_pct"},
    "few_threads": {"occupancy_pct"},
    "global_atomics": {"red_sectors_per_element", "ablation:atomicAdd"},
    "bank_conflicts": {"bank_conflicts_per_wavefront", "stall:short_scoreboard",
                       "stall:mio_throttle"},
    "barriers": {"stall:barrier"},
    "order_of_additions": {"differing_channels"},
    "second_launch": {"second_kernel_us"},
}
#: what to look for, where the learner's figure cannot show their cause (no answer named)
HINTS = {
    "dram_bandwidth": "Which figure says how busy DRAM was?",
    "storage_width": "Which figure counts the bytes DRAM moved for each element?",
    "few_loads_in_flight": "Which figures say that warps wait on loads while DRAM is not busy?",
    "uncoalesced": "Which figure says how much of each fetched sector a load used?",
    "few_threads": "Which figure says how many of the warp slots were filled?",
    "global_atomics": "Which figure counts what L2 does for them?",
    "bank_conflicts": "Which figure counts shared memory's extra passes, or the stalls behind "
                      "them?",
    "barriers": "Which stall reason is a warp waiting at __syncthreads?",
    "order_of_additions": "Which figure compares the bits of repeated calls?",
    "second_launch": "Which figure times the call's other kernel?",
}
#: a sentence where a figure is a likely but wrong pick for a cause
NOT_SHOWN = {
    ("global_atomics", "stall:long_scoreboard"):
        "a global atomic whose result is unused, a REDG, is fire-and-forget: no warp waits on it",
}


def lookup(name: str) -> tuple[Metric, str | None]:
    """The :class:`Metric` a name stands for, and its argument (``"stall:barrier"`` ->
    the stall template and ``"barrier"``); ValueError for a name that is none."""
    if isinstance(name, str) and name in METRICS and "<" not in name:
        return METRICS[name], None
    family, _, arg = name.partition(":") if isinstance(name, str) else ("", "", "")
    for template in ("stall:<reason>", "ablation:<label>"):
        if family == template.split(":")[0] and arg.isidentifier():
            return METRICS[template], arg
    raise ValueError(f"not a figure of an opening: {name!r}")


def _words(name: str) -> tuple[str, str]:
    m, arg = lookup(name)
    waits = nsight.WAITS_ON.get(arg or "", arg or "")
    return (m.label.replace("<reason>", arg or "").replace("<label>", arg or ""),
            m.counts.replace("<waits>", waits).replace("<label>", arg or ""))


def figure(opening, name: str):
    """The opening's figure ``name`` (None where it does not show one)."""
    m, arg = lookup(name)
    return m.getter(opening, arg)


def why_missing(opening, name: str) -> str:
    """Why the opening shows no figure ``name``: the profile's reason, or what was not measured."""
    field = {"dram_bytes_per_element": "dram_bytes", "red_sectors_per_element":
             "atomic_sectors_per_element", "bank_conflicts_per_wavefront":
             "conflicts_per_wavefront"}.get(name, name)
    if name.startswith("stall:"):
        return ("the saved run listed only its top three stall reasons" if opening.profile.stalls
                else opening.profile.why_missing("dram_pct"))
    if name == "second_kernel_us" and opening.extra:
        return next(iter(opening.extra.values())).why_missing("duration_us")
    if name in getattr(opening, "lacking", {}):
        return opening.lacking[name]
    if name.startswith(("ablation:", "differing_channels", "second_kernel")) or name == "time_ms":
        return "this opening did not measure it"
    return opening.profile.why_missing(field)


def _show(value: float, unit: str = "") -> str:
    text = f"{value:.3g}" if abs(value) < 1 else f"{value:.1f}".removesuffix(".0")
    return f"{text} {unit}".strip()


def _support(cause: str, opening) -> tuple[bool | None, str]:
    """(True, why) where the opening supports ``cause``, (False, why not), or (None, what it does
    not show) where the figures the rule needs are missing."""
    def get(name):
        return figure(opening, name)

    def lacking(*names):
        label, why = _words(names[0])[0], why_missing(opening, names[0])
        return None, f"this opening does not show {label} ({why})"

    if cause in ("dram_bandwidth", "few_loads_in_flight"):
        dram = get("dram_pct")
        if dram is None:
            return lacking("dram_pct")
        if cause == "dram_bandwidth":
            return (dram >= DRAM_BUSY_PCT,
                    f"DRAM at {_show(dram)} % of its peak is "
                    f"{'at or above' if dram >= DRAM_BUSY_PCT else 'under'} the "
                    f"{DRAM_BUSY_PCT:.0f} % line")
        top = opening.profile.top_stalls(1)
        if not top:
            return lacking("stall:long_scoreboard")
        if dram >= DRAM_BUSY_PCT:
            return False, (f"DRAM is at {_show(dram)} % of its peak: it does not idle, "
                           "whatever the warps wait on")
        if top[0][0] != "long_scoreboard":
            return False, (f"the top stall is {top[0][0]} ({top[0][2]:.0f} %), not a wait on "
                           "global loads")
        occ = get("occupancy_pct")
        note = "" if occ is None or occ < 50 else (
            f"; {occ:.0f} % of the warp slots are filled: the warps are there, so what are their "
            "loads waiting behind?")
        return True, (f"DRAM at {_show(dram)} % of its peak while long_scoreboard (waiting on "
                      f"global loads) is the top stall, {top[0][2]:.0f} % of stalls{note}")
    if cause == "storage_width":
        b = get("dram_bytes_per_element")
        if b is None:
            return lacking("dram_bytes_per_element")
        return (b >= WIDE_BYTES_PER_ELEMENT,
                f"DRAM moved {_show(b, 'B')} per element; {WIDE_BYTES_PER_ELEMENT:.0f} B lies "
                "between bf16's 8 and fp32's 16")
    if cause == "uncoalesced":
        e = get("load_efficiency_pct")
        if e is None:
            return lacking("load_efficiency_pct")
        return (e <= UNCOALESCED_PCT,
                f"the loads use {_show(e)} % of each sector they fetch" + (
                    "" if e <= UNCOALESCED_PCT else ": nearly all of it, so they are coalesced"))
    if cause == "few_threads":
        occ = get("occupancy_pct")
        if occ is None:
            return lacking("occupancy_pct")
        if occ <= FEW_WARPS_PCT:
            return True, f"only {_show(occ)} % of the warp slots are filled"
        return False, (f"{_show(occ)} % of the warp slots are filled: more warps are not what is "
                       "missing here")
    if cause == "global_atomics":
        s, a = get("red_sectors_per_element"), get("ablation:atomicAdd")
        if s is None and a is None:
            return lacking("red_sectors_per_element")
        if s is not None and s >= ATOMIC_SECTORS_PER_ELEMENT:
            return True, f"L2 updates {_show(s)} atomic sectors per element"
        if a is not None and a >= ATOMIC_ABLATION_PCT:
            return True, f"taking the atomicAdd out removes {_show(a)} % of the time"
        said = [f"L2 updates {_show(s)} atomic sectors per element"] if s is not None else []
        said += [f"the atomicAdd's ablation removes {_show(a)} % of the time"] if a is not None \
            else []
        return False, " and ".join(said) + ": the atomics are not what bounds this call"
    if cause == "bank_conflicts":
        c = get("bank_conflicts_per_wavefront")
        if c is not None and c >= CONFLICTS_PER_WAVEFRONT:
            return True, f"shared memory makes {_show(c)} extra passes per conflict-free one"
        p = opening.profile
        known = [p.stall_share(r) for r in ("short_scoreboard", "mio_throttle")]
        most = sum(p.stall_share_at_most(r) for r in ("short_scoreboard", "mio_throttle"))
        if None not in known and sum(known) >= SHARED_STALLS_PCT:
            return True, f"{sum(known):.0f} % of the stalls wait on shared memory"
        if c is None and most >= SHARED_STALLS_PCT:
            return lacking("bank_conflicts_per_wavefront")
        return False, (f"{'no' if c is None or c < 0.05 else f'{_show(c)}'} extra shared-memory "
                       f"passes per wavefront, and at most {most:.0f} % of the stalls wait on "
                       "shared memory")
    if cause == "barriers":
        b = opening.profile.stall_share("barrier")
        if b is None:
            at_most = opening.profile.stall_share_at_most("barrier")
            if at_most < BARRIER_PCT:
                return False, f"at most {at_most:.0f} % of the stalls are at barriers"
            return lacking("stall:barrier")
        return (b >= BARRIER_PCT, f"{b:.0f} % of the stalls are at barriers")
    if cause == "order_of_additions":
        d = get("differing_channels")
        if d is None:
            return lacking("differing_channels")
        return (d > 0, f"{_show(d)} channels differ between identical calls")
    if cause == "second_launch":
        k, t = get("second_kernel_us"), get("time_ms")
        if k is None or t is None:
            return lacking("second_kernel_us" if k is None else "time_ms")
        share = 100 * k * 1e-3 / t
        return (share >= SECOND_KERNEL_PCT,
                f"the second kernel takes {_show(k, 'us')}, {share:.0f} % of the call's "
                f"{_show(t, 'ms')}")
    raise ValueError(f"cause must be one of {', '.join(CAUSES)}, got {cause!r}")


#: cause -> predicate(opening) -> (supported, sentence); a missing figure is not support
SUPPORT = {cause: (lambda o, c=cause: (bool(_support(c, o)[0]), _support(c, o)[1]))
           for cause in CAUSES}


def causes() -> None:
    """Print the causes and the figures a diagnosis may name (the words, not the answers)."""
    print("causes (cause=...):")
    for name, sentence in CAUSES.items():
        print(f"  {name:<22} {sentence}")
    print("figures of an opening (metric=...), each the row of its label:")
    for name, m in METRICS.items():
        unit = f" [{m.unit}]" if m.unit else ""
        print(f"  {name:<30} {m.label}{unit}")
        print(textwrap.fill(m.counts.replace("<waits>", "that reason"), width=96,
                            initial_indent=" " * 33, subsequent_indent=" " * 33))
    print(textwrap.fill("stall reasons (stall:<reason>): " + ", ".join(nsight.WAITS_ON),
                        width=96, initial_indent="  ", subsequent_indent="    "))


def _choice(answer, options, what: str):
    listed = ", ".join(f'"{o}"' for o in options)
    if answer is None or answer is Ellipsis:
        return None, failed(f"replace {'None' if answer is None else 'the ...'} {what} with one "
                            f"of {listed}")
    pick = answer.strip().lower() if isinstance(answer, str) else None
    if pick not in options:
        return None, failed(f"give {what} as one of {listed}, got {answer!r}")
    return pick, None


def _bound(answer):
    if isinstance(answer, str):
        answer = answer.strip().lower().removesuffix("-bound").removesuffix(" bound").strip()
    return _choice(answer, BOUNDS, "the bound")


def _misread(opening, name: str, value: float, shown: float) -> str:
    """Which row to read again, never its value (the learner reads it, the check does not)."""
    label, _ = _words(name)
    said = (f"you read {name} as {_show(value)}; that is not what the row '{label}' shows: "
            "read it again")
    for other in ("dram_pct", "occupancy_pct", "load_efficiency_pct", "time_ms"):
        there = figure(opening, other)
        if other != name and there is not None and abs(there - value) <= max(
                METRICS[other].read_tolerance, 0.05 * abs(there)):
            said += f"; {_show(value)} is the row '{METRICS[other].label}'"
            break
    return said


def _wrong_figure(cause, metric: str) -> str | None:
    """Why ``metric`` cannot show ``cause`` (the bound, where no cause is asked), else None."""
    label, counts = _words(metric)
    if cause is NOT_ASKED:
        return None if metric == "dram_pct" else (f"{label} counts {counts}; the bound is read "
                                                  "from how busy DRAM was")
    note = NOT_SHOWN.get((cause, metric))
    return None if metric in SHOWS[cause] else (
        f"{label} counts {counts}: it does not show that {CAUSES[cause]}"
        + (f" ({note})" if note else "") + f". {HINTS[cause]}")


def check(opening, *, bound, cause, metric: str, value, this_lesson: tuple[str, ...],
          rung: str | None = None) -> Verdict:
    """Judge a diagnosis of ``opening``: ``bound`` ("memory" or "latency"), ``cause`` (a name of
    :data:`CAUSES`, or :data:`NOT_ASKED`), ``metric`` (a figure of :data:`METRICS` that shows it),
    ``value`` (that figure as read from the opening). In order, each a NOT YET that says why:
    every answer given; the bound against the reading's rule; the value within the figure's
    tolerance (naming the row to read again, never its value); the figure one that can show the
    cause; the opening supporting the cause; the cause one the lesson's kernel removes
    (``this_lesson``, where given; ``rung``: its name), else "true, but it leaves it". Where a
    saved opening (no GPU here) lacks the figure one of these needs, NOT VERIFIED, saying why.
    PASS says why, gives the reading line and whose measurement it is."""
    unknown = [c for c in this_lesson if c not in CAUSES]
    if unknown:  # the lesson's own argument: a mistake of the course, not of the learner
        raise ValueError(f"this_lesson must name causes of CAUSES, got {unknown}")
    if bound is not NOT_ASKED:
        bound, verdict = _bound(bound)
        if verdict is not None:
            return verdict
    if cause is not NOT_ASKED:
        cause, verdict = _choice(cause, tuple(CAUSES), "the cause")
        if verdict is not None:
            return verdict
    if metric is None or metric is Ellipsis:
        return failed(f"replace {'None' if metric is None else 'the ...'} metric with the name "
                      "of the figure that shows it (rl.diagnose.causes() lists them)")
    try:
        m, _ = lookup(metric)
    except ValueError:
        return failed(f"metric {metric!r} is not a figure of an opening: rl.diagnose.causes() "
                      "lists them (stall reasons as \"stall:long_scoreboard\")")
    value, verdict = read_number(value, "value with the figure as you read it in the opening")
    if verdict is not None:
        return verdict
    p = opening.profile
    # a saved opening that lacks a figure cannot judge a reading of it: NOT VERIFIED, never NOT YET
    lacking, on_gpu = (failed, "") if opening.measured_now else (
        not_verified, ": run the opening on a GPU, where every figure is measured")
    if bound is not NOT_ASKED:
        if p.dram_pct is None:
            return lacking(f"this opening ({opening.source}) shows no DRAM throughput ("
                           f"{why_missing(opening, 'dram_pct')}), so its bound cannot be judged "
                           f"here{on_gpu}")
        right = "memory" if p.dram_pct >= DRAM_BUSY_PCT else "latency"
        if bound != right:
            return failed(
                f"{bound}-bound means "
                + ("DRAM busy most of the launch, its throughput at or above"
                   if bound == "memory" else "DRAM idle while warps wait, its throughput under")
                + f" {DRAM_BUSY_PCT:.0f} % of its peak (lesson 02's rule): read the row "
                f"'{METRICS['dram_pct'].label}' again against that line")
    shown = figure(opening, metric)
    wrong = _wrong_figure(cause, metric)  # said first: it holds whatever the figure reads
    if shown is None and wrong is None:
        return lacking(f"this opening ({opening.source}) has no figure '{_words(metric)[0]}' "
                       f"({why_missing(opening, metric)}), so a reading of it cannot be judged "
                       f"here{on_gpu}, or name a figure it shows")
    if shown is not None and abs(value - shown) > max(m.read_tolerance, 0.05 * abs(shown)):
        return failed(_misread(opening, metric, value, shown))
    if wrong is not None:
        return failed(wrong)
    if cause is NOT_ASKED:
        return passed(f"{nsight.reading(p)} ({opening.source})")
    supported, why = _support(cause, opening)
    if supported is None:
        return lacking(why + f": this opening cannot judge that cause{on_gpu}, or name a cause "
                             "it shows")
    if not supported:
        return failed(why)
    kernel = rung or "this lesson's kernel"
    why = why if why.endswith(("?", ".")) else why + "."
    if this_lesson and cause not in this_lesson:  # true, but not what the lesson's change is for
        return failed(f"{why} True of this opening, but {kernel} leaves it: which other cause "
                      f"that this opening supports does {kernel} remove?")
    lesson = f" Right, and {kernel} goes after it." if this_lesson else ""
    return passed(f"{why} {nsight.reading(p)} ({opening.source}).{lesson}")
