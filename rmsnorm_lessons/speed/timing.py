"""The timing loop and the buffers it times on: CUDA events, warm-up, median of many bursts, inputs
larger than L2.

Each timed burst of launches is queued behind a short busy kernel so the host's launch overhead is
not counted, each timed launch follows a launch of its own kind (so it pays for the dirty L2 lines
its own kind leaves, as in a loop, not for another kernel's), and consecutive launches read
different buffer sets (together larger than L2), so the figure is the speed from device memory, not
from the cache. :mod:`rmsnorm_lessons.speed.bench` (the sweeps and their reports),
:mod:`rmsnorm_lessons.speed.peers`, :mod:`rmsnorm_lessons.lessons.lesson09.inflight` and
:mod:`rmsnorm_lessons.inspection.nsight` build on it.
"""
from __future__ import annotations

import math
import statistics
import sys
from dataclasses import asdict, dataclass

import numpy as np

from ..core import build, gpu, launch, reference
from . import gpu_turn

_sleeper = None
#: how long the busy kernel ahead of each timed burst runs, per launch of the burst: more than the
#: host's work per launch (PyCUDA's argument handling and a version's plan take some 20-60 us, more
#: when the host is busy), so the burst is queued before the GPU reaches it. A burst that was not
#: (the sleep had ended when the host finished queueing it) is timed again with twice the sleep.
SLEEP_US = 100
#: the longest sleep a burst gets (us); a host slower than that is reported, not waited for
MAX_SLEEP_US = 50_000
#: launches timed back to back in one window, the window's time divided among them, behind one
#: untimed launch of the same kind. Each timed launch's predecessor is then the same kernel, as in a
#: loop: L2 is write-back, so a kernel leaves up to an L2 of dirty lines behind, and whatever runs
#: next pays for writing them. Timed alone after a sleep, v7 (dinp=) at 16384x4096 took 0.107 to
#: 0.121 ms depending on what ran before it (results/NOTES.md); in bursts of 20, 0.118.
BURST = 4


def _sleeper_function():
    global _sleeper
    if _sleeper is None:
        _sleeper = build.source_module("timing").get_function("gpu_sleep")
    return _sleeper


def _sleep(us: float, stream=None):
    _sleeper_function()
    clock_khz = gpu.require().device.get_attribute(gpu.driver().device_attribute.CLOCK_RATE)
    _sleeper(np.int64(us * clock_khz / 1e3), block=(1, 1, 1), grid=(1, 1, 1), stream=stream)


def time_ms(launch, sets: int = 1, warmup: int = 5, repeats: int = 50, stream=None,
            burst: int = BURST, *,
            name: str = "launch", before=None, sleep_us: float = SLEEP_US) -> list[float]:
    """Time ``launch(i)`` (``i`` = which buffer set) in ``repeats`` bursts of ``burst`` back-to-back
    launches; return each burst's milliseconds per launch. ``name`` names it in a warning;
    ``before`` and ``sleep_us`` as in :func:`time_interleaved`."""
    times = time_interleaved({name: launch}, sets, warmup, repeats, stream, burst,
                             before=None if before is None else {name: before},
                             sleep_us=sleep_us)
    return times[name]


class Times(dict):
    """:func:`time_interleaved`'s figures, name -> per round; ``turn``: how the GPU was had
    (:class:`~rmsnorm_lessons.speed.gpu_turn.Turn`: alone in the room's turn, or shared)."""

    def __init__(self, figures: dict, turn: gpu_turn.Turn):
        super().__init__({name: Runs(runs, turn) for name, runs in figures.items()})
        self.turn = turn


class Runs(list):
    """:func:`time_ms`'s figures, with the ``turn`` they were measured in."""

    def __init__(self, figures, turn: gpu_turn.Turn):
        super().__init__(figures)
        self.turn = turn


def time_interleaved(launches: dict, sets: int = 1, warmup: int = 5, repeats: int = 50, stream=None,
                     burst: int = BURST, *, before: dict | None = None,
                     sleep_us: float = SLEEP_US) -> dict:
    """Time several launches against each other (A/B interleaving): ``launches`` maps a name to
    ``launch(i)`` (``i`` = which buffer set); in each of ``repeats`` rounds every launch runs one
    untimed launch and then a timed burst of ``burst`` launches, back to back, in turn, so a drift
    of the GPU over the run (clocks, temperature, a neighbour) lands on all of them alike, and each
    timed launch follows its own kind (:data:`BURST` says why). Consecutive launches take
    consecutive buffer sets, among a number of sets that shares no factor with the launches of a
    round (:func:`rotation`), so that every launch visits every set in use. Returns each name's
    milliseconds per launch, one figure per round.

    ``before`` maps a name to ``prepare(i)``, run untimed ahead of each of its launches on the same
    set (a launch that cannot repeat without it: it is then timed one launch at a time, ``burst`` =
    1, with no untimed launch of its own). ``sleep_us``: the first sleep ahead of a burst, per
    launch in it.

    In a workshop room the GPU is taken in turn first (:mod:`.gpu_turn`: the queue says who is
    ahead); the result (:class:`Times`) says whether it was measured alone or shared."""
    if gpu_turn.in_room() and gpu_turn.held() is None:
        _sleeper_function()  # built (nvcc, once) before the turn: the turn is for the GPU alone
    with gpu_turn.turn("timing") as turn:
        return Times(_interleaved(launches, sets, warmup, repeats, stream, burst, before,
                                  sleep_us), turn)


def _interleaved(launches, sets, warmup, repeats, stream, burst, before, sleep_us) -> dict:
    before = before or {}
    if burst < 1:
        raise ValueError(f"burst must be at least 1, got {burst}")
    if before and burst != 1:
        raise ValueError("a launch with a call before each one is timed alone: burst must be 1, "
                         f"got {burst}")
    drv = gpu.driver()
    start, stop, queued = drv.Event(), drv.Event(), drv.Event()
    sets = rotation(sets, len(launches) * (burst + 1))
    turn = 0
    for _ in range(warmup):
        for name, launch in launches.items():
            if name in before:
                before[name](turn % sets)
            launch(turn % sets)
            turn += 1
    sleep = {name: sleep_us * (burst + (name not in before)) for name in launches}
    times = {name: [] for name in launches}
    host_bound = set()
    for _ in range(repeats):
        for name, launch in launches.items():
            while True:
                if name in before:
                    before[name](turn % sets)
                _sleep(sleep[name], stream)
                queued.record(stream)  # reached when the sleep ends
                if name not in before:
                    launch(turn % sets)  # untimed: the first timed launch follows its own kind too
                    turn += 1
                start.record(stream)
                for _ in range(burst):
                    launch(turn % sets)
                    turn += 1
                stop.record(stream)
                # the GPU was done sleeping before the host had queued the burst
                late = queued.query()
                stop.synchronize()
                if not late or sleep[name] >= MAX_SLEEP_US:
                    break
                sleep[name] = min(2 * sleep[name], MAX_SLEEP_US)
            if late and name not in host_bound:
                host_bound.add(name)
                print(f"timing {name}: the host could not queue {burst} launches within "
                      f"{MAX_SLEEP_US} us; "
                      f"its time includes the host's", file=sys.stderr)
            times[name].append(stop.time_since(start) / burst)
    return times


def rotation(sets: int, launches: int) -> int:
    """How many of ``sets`` buffer sets ``launches`` interleaved launches rotate through: the
    largest count up to ``sets`` with no factor in common with ``launches``. With 8 sets and 2
    launches taking turns, each launch would only ever see 4 of the sets (and with 4 launches, 2):
    allocations differ in speed by a few %, so two rows would be timed on different memory. With 7,
    each sees all 7."""
    if sets < 1 or launches < 1:
        raise ValueError(f"sets and launches must be at least 1, got {sets} and {launches}")
    return next(m for m in range(sets, 0, -1) if math.gcd(m, launches) == 1)


#: at least this many buffer sets are rotated at every shape (memory permitting): with 2, a large
#: shape's launches alternate between two allocations, whose speeds can differ by a few %, and the
#: median is then one of two clusters
MIN_SETS = 8
#: a row whose spread, (p90 - p10) / median, is above this is timed again (sweep), and flagged if it
#: stays
NOISY_SPREAD = 0.2


def sets_for(bytes_per_set: int, l2_bytes: int, free_bytes: int) -> int:
    """How many buffer sets to rotate so that consecutive launches find nothing useful in L2
    (together at least three times L2, and at least :data:`MIN_SETS`), within half the free
    memory."""
    want = max(MIN_SETS, -(-3 * l2_bytes // max(bytes_per_set, 1)))
    fit = max(1, int(0.5 * free_bytes // max(bytes_per_set, 1)))
    return max(1, min(want, fit, 64))


@dataclass
class Timing:
    name: str
    N: int
    C: int
    ms: float  # median
    ms_spread: float  # (p90 - p10) / median
    bytes: int
    gbps: float
    copy_gbps: float
    burst: int = 1  # launches timed back to back per figure (1: a launch alone, as before bursts)
    #: in a workshop room: "alone" (the room's GPU turn held) or "shared" (measured while others
    #: may have used the GPU); "" outside a room (:mod:`.gpu_turn`)
    gpu: str = ""

    @property
    def fraction_of_copy(self) -> float:
        return self.gbps / self.copy_gbps if self.copy_gbps else float("nan")

    @property
    def noisy(self) -> bool:
        """Its launches' times spread more than :data:`NOISY_SPREAD` of the median: a figure to
        distrust."""
        return self.ms_spread > NOISY_SPREAD

    def as_dict(self):
        d = asdict(self)
        d["fraction_of_copy"] = self.fraction_of_copy
        return d



def _timing(name, N, C, times, nbytes, copy_gbps, burst: int = BURST) -> Timing:
    """A :class:`Timing` from one name's figures (a :class:`Runs` or :class:`Times` entry carries
    the GPU turn it was measured in)."""
    med = statistics.median(times)
    p10, p90 = np.percentile(times, [10, 90])
    turn = getattr(times, "turn", None)
    return Timing(name, N, C, med, float((p90 - p10) / med), nbytes, nbytes / (med * 1e-3) / 1e9,
                  copy_gbps, burst, turn.mark() if turn is not None else "")



def steady(timed, log=sys.stderr, first: Timing | None = None) -> Timing:
    """``timed()`` (a :class:`Timing`), timed once more when its spread is above
    :data:`NOISY_SPREAD`; the steadier of the two is kept, and a row that stays noisy says so on
    ``log`` (``Timing.noisy``). ``first``: the row's first timing, already made (by
    :func:`time_interleaved`); ``timed`` then only times it again."""
    first = first or timed()
    if not first.noisy:
        return first
    second = timed()
    kept = min(first, second, key=lambda t: t.ms_spread)
    if kept.noisy:
        print(f"noisy: {kept.name} at {kept.N}x{kept.C}: spread {100 * kept.ms_spread:.0f} % of "
              "the median "
              f"after two runs", file=log)
    return kept


def _raw(a: np.ndarray) -> np.ndarray:
    return gpu.as_bytes(np.ascontiguousarray(a))


class DeviceProblem:
    """``sets`` random problems of shape (N, C) for a version's dtype, resident on the GPU."""

    def __init__(self, N: int, C: int, dtype, sets: int | None = None, seed: int = 0):
        drv = gpu.driver()
        p = reference.random_problem(N, C, dtype, seed=seed)
        self.host = p
        per_set = sum(p[k].nbytes for k in ("dout", "inp", "dinp", "rstd"))
        if sets is None:
            free, _ = drv.mem_get_info()
            sets = sets_for(per_set, gpu.facts().l2_bytes, free)
        self.sets = sets
        self.weight = drv.to_device(_raw(p["weight"]))
        self.dweight = drv.to_device(_raw(p["dweight"]))
        self.buffers = []
        self._allocs = [self.weight, self.dweight]
        for _ in range(sets):
            bufs = {k: drv.to_device(_raw(p[k])) for k in ("dout", "inp", "dinp", "rstd")}
            self._allocs += list(bufs.values())
            self.buffers.append(launch.Tensors(dinp=int(bufs["dinp"]), dweight=int(self.dweight),
                                               dout=int(bufs["dout"]), inp=int(bufs["inp"]),
                                               weight=int(self.weight), rstd=int(bufs["rstd"])))

    def free(self):
        for a in self._allocs:
            a.free()
        self._allocs = []

