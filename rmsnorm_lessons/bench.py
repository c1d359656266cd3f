"""Timing, in one place: CUDA events, warm-up, median of many bursts, inputs larger than L2.

Each timed burst of launches is queued behind a short busy kernel so the host's launch overhead is not
counted, each timed launch follows a launch of its own kind (so it pays for the dirty L2 lines its own
kind leaves, as in a loop, not for another kernel's), and consecutive launches read different buffer
sets (together larger than L2), so the figure is the speed from device memory, not from the cache.
Bandwidth is the bytes a version must move (:meth:`Version.bytes_moved`) over the median time, reported
against the device-to-device copy bandwidth measured in the same process.
"""
from __future__ import annotations

import math
import statistics
import sys
from dataclasses import asdict, dataclass

import numpy as np

from . import bf16, build, gpu, ladder, launch, reference, validate
from . import check as checking  # sweep() has a parameter called check

#: the shapes of the issue's benchmark (N, C): six above L2, two latency-bound
LARGE_SHAPES = [(32768, 768), (32768, 1024), (16384, 2048), (16384, 4096), (8192, 8192), (4096, 16384)]
SMALL_SHAPES = [(8192, 768), (1024, 4096)]
#: rows wider than one block of v7 can hold (issue 16): versions that cannot run them are skipped
WIDE_SHAPES = [(4096, 32768), (2048, 65536)]
#: the default sweep
SHAPES = LARGE_SHAPES + SMALL_SHAPES + WIDE_SHAPES


def progress(iterable, total=None, desc=""):
    """tqdm where it is installed (a widget in JupyterLab), else the plain iterable."""
    try:
        from tqdm.auto import tqdm
    except ImportError:  # pragma: no cover
        return iterable
    return tqdm(iterable, total=total, desc=desc, file=sys.stderr, leave=False)


_sleeper = None
#: how long the busy kernel ahead of each timed burst runs, per launch of the burst: more than the host's
#: work per launch (PyCUDA's argument handling and a version's plan take some 20-60 us, more when the host
#: is busy), so the burst is queued before the GPU reaches it. A burst that was not (the sleep had ended
#: when the host finished queueing it) is timed again with twice the sleep.
SLEEP_US = 100
#: the longest sleep a burst gets (us); a host slower than that is reported, not waited for
MAX_SLEEP_US = 50_000
#: launches timed back to back in one window, the window's time divided among them, behind one untimed
#: launch of the same kind. Each timed launch's predecessor is then the same kernel, as in a loop: L2 is
#: write-back, so a kernel leaves up to an L2 of dirty lines behind, and whatever runs next pays for
#: writing them. Timed alone after a sleep, v7 (dinp=) at 16384x4096 took 0.107 to 0.121 ms depending on
#: what ran before it (results/NOTES.md); in bursts of 20, 0.118.
BURST = 4


def _sleep(us: float, stream=None):
    global _sleeper
    if _sleeper is None:
        _sleeper = build.source_module("timing").get_function("gpu_sleep")
    clock_khz = gpu.require().device.get_attribute(gpu.driver().device_attribute.CLOCK_RATE)
    _sleeper(np.int64(us * clock_khz / 1e3), block=(1, 1, 1), grid=(1, 1, 1), stream=stream)


def time_ms(launch, sets: int = 1, warmup: int = 5, repeats: int = 50, stream=None, burst: int = BURST, *,
            name: str = "launch", before=None, sleep_us: float = SLEEP_US) -> list[float]:
    """Time ``launch(i)`` (``i`` = which buffer set) in ``repeats`` bursts of ``burst`` back-to-back launches;
    return each burst's milliseconds per launch. ``name`` names it in a warning; ``before`` and ``sleep_us``
    as in :func:`time_interleaved`."""
    return time_interleaved({name: launch}, sets, warmup, repeats, stream, burst,
                            before=None if before is None else {name: before}, sleep_us=sleep_us)[name]


def time_interleaved(launches: dict, sets: int = 1, warmup: int = 5, repeats: int = 50, stream=None,
                     burst: int = BURST, *, before: dict | None = None, sleep_us: float = SLEEP_US) -> dict:
    """Time several launches against each other (A/B interleaving): ``launches`` maps a name to
    ``launch(i)`` (``i`` = which buffer set); in each of ``repeats`` rounds every launch runs one untimed
    launch and then a timed burst of ``burst`` launches, back to back, in turn, so a drift of the GPU over
    the run (clocks, temperature, a neighbour) lands on all of them alike, and each timed launch follows
    its own kind (:data:`BURST` says why).
    Consecutive launches take consecutive buffer sets, among a number of sets that shares no factor with
    the launches of a round (:func:`rotation`), so that every launch visits every set in use. Returns each
    name's milliseconds per launch, one figure per round.

    ``before`` maps a name to ``prepare(i)``, run untimed ahead of each of its launches on the same set
    (a launch that cannot repeat without it: it is then timed one launch at a time, ``burst`` = 1, with no
    untimed launch of its own). ``sleep_us``: the first sleep ahead of a burst, per launch in it."""
    before = before or {}
    if burst < 1:
        raise ValueError(f"burst must be at least 1, got {burst}")
    if before and burst != 1:
        raise ValueError(f"a launch with a call before each one is timed alone: burst must be 1, got {burst}")
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
                late = queued.query()  # the GPU was done sleeping before the host had queued the burst
                stop.synchronize()
                if not late or sleep[name] >= MAX_SLEEP_US:
                    break
                sleep[name] = min(2 * sleep[name], MAX_SLEEP_US)
            if late and name not in host_bound:
                host_bound.add(name)
                print(f"timing {name}: the host could not queue {burst} launches within {MAX_SLEEP_US} us; "
                      f"its time includes the host's", file=sys.stderr)
            times[name].append(stop.time_since(start) / burst)
    return times


def rotation(sets: int, launches: int) -> int:
    """How many of ``sets`` buffer sets ``launches`` interleaved launches rotate through: the largest count
    up to ``sets`` with no factor in common with ``launches``. With 8 sets and 2 launches taking turns,
    each launch would only ever see 4 of the sets (and with 4 launches, 2): allocations differ in speed by
    a few %, so two rows would be timed on different memory. With 7, each sees all 7."""
    if sets < 1 or launches < 1:
        raise ValueError(f"sets and launches must be at least 1, got {sets} and {launches}")
    return next(m for m in range(sets, 0, -1) if math.gcd(m, launches) == 1)


#: at least this many buffer sets are rotated at every shape (memory permitting): with 2, a large shape's
#: launches alternate between two allocations, whose speeds can differ by a few %, and the median is then
#: one of two clusters
MIN_SETS = 8
#: a row whose spread, (p90 - p10) / median, is above this is timed again (sweep), and flagged if it stays
NOISY_SPREAD = 0.2


def sets_for(bytes_per_set: int, l2_bytes: int, free_bytes: int) -> int:
    """How many buffer sets to rotate so that consecutive launches find nothing useful in L2 (together at
    least three times L2, and at least :data:`MIN_SETS`), within half the free memory."""
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

    @property
    def fraction_of_copy(self) -> float:
        return self.gbps / self.copy_gbps if self.copy_gbps else float("nan")

    @property
    def noisy(self) -> bool:
        """Its launches' times spread more than :data:`NOISY_SPREAD` of the median: a figure to distrust."""
        return self.ms_spread > NOISY_SPREAD

    def as_dict(self):
        d = asdict(self)
        d["fraction_of_copy"] = self.fraction_of_copy
        return d


def _raw(a: np.ndarray) -> np.ndarray:
    # PyCUDA copies through the buffer protocol, which ml_dtypes' bfloat16 does not export
    return np.ascontiguousarray(a).view(np.uint8)


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


OVERWRITE_SUFFIX = " (dinp=)"


def overwrite_name(version) -> str:
    """The name of a version's row when it runs in overwrite mode (dinp =, dinp not read)."""
    return f"{ladder.get(version).name}{OVERWRITE_SUFFIX}"


def bench_version(version, N: int, C: int, copy_gbps: float, repeats: int = 50, problem=None, *,
                  overwrite: bool = False, config=None, block_size: int | None = None,
                  name: str | None = None) -> Timing:
    """Time one version at one shape (inputs rotated among buffer sets larger than L2).

    ``overwrite``: time the overwrite mode (dinp =), counting the bytes that mode moves; ``config``: v7's
    variants (:class:`~rmsnorm_lessons.ladder.v7_fast.Config`); ``name``: the row's name (default: the
    version's, with `` (dinp=)`` in overwrite mode).
    """
    spec = ladder.get(version)
    own = problem is None
    problem = problem or DeviceProblem(N, C, spec.dtype)
    try:
        L = launch.launcher(spec, C, overwrite=overwrite, config=config, block_size=block_size)
        times = time_ms(lambda i: L(N, problem.buffers[i]), sets=problem.sets, repeats=repeats)
    finally:
        if own:
            problem.free()
    name = name or (overwrite_name(spec) if overwrite else spec.name)
    return _timing(name, N, C, times, spec.bytes_moved(N, C, overwrite=overwrite), copy_gbps)


def _timing(name, N, C, times, nbytes, copy_gbps, burst: int = BURST) -> Timing:
    med = statistics.median(times)
    p10, p90 = np.percentile(times, [10, 90])
    return Timing(name, N, C, med, float((p90 - p10) / med), nbytes, nbytes / (med * 1e-3) / 1e9, copy_gbps,
                  burst)


def check_overwrite(version, N: int, C: int, seed=0):
    """Run ``version`` in overwrite mode on random inputs (dinp starting non-zero) and compare with the
    float64 gradient alone (dinp) and the accumulated dweight: a :class:`check.CheckReport`."""
    return checking.check_version(version, N, C, seed=seed, overwrite=True)


def steady(timed, log=sys.stderr, first: Timing | None = None) -> Timing:
    """``timed()`` (a :class:`Timing`), timed once more when its spread is above :data:`NOISY_SPREAD`; the
    steadier of the two is kept, and a row that stays noisy says so on ``log`` (``Timing.noisy``).
    ``first``: the row's first timing, already made (by :func:`time_interleaved`); ``timed`` then only
    times it again."""
    first = first or timed()
    if not first.noisy:
        return first
    second = timed()
    kept = min(first, second, key=lambda t: t.ms_spread)
    if kept.noisy:
        print(f"noisy: {kept.name} at {kept.N}x{kept.C}: spread {100 * kept.ms_spread:.0f} % of the median "
              f"after two runs", file=log)
    return kept


def sweep(versions=None, shapes=None, repeats: int = 50, check: bool = True, copy_gbps: float | None = None,
          overwrite: bool = False, ceiling: bool = False):
    """Check (optionally) and time every version at every shape; the copy yardstick measured first.

    Returns a list of :class:`Timing`, shape by shape; a version that cannot run a shape (its C rule, its
    shared memory) is left out and reported on stderr. With ``overwrite``, versions that offer the
    overwrite mode get a second row in that mode (named by :func:`overwrite_name`), checked in that mode
    first. With ``ceiling``, each shape also gets the same-bytes ceiling (:func:`stream_ceiling`'s kernel)
    in each mode timed there, as rows of its own (``percent_of_ceiling`` in :func:`records` reads them).
    The rows of a shape are timed interleaved (:func:`time_interleaved`) on shared buffer sets; a row
    whose spread is above :data:`NOISY_SPREAD` is then timed again alone (:func:`steady`).
    """
    versions = list(versions or ladder.VERSIONS)
    shapes = list(shapes or SHAPES)
    copy_gbps = copy_gbps or copy_yardstick().gbps
    results = []
    for N, C in progress(shapes, total=len(shapes), desc="bench"):
        rows = []  # (rung, overwrite), each checked against float64 before anything is timed
        for version in versions:
            spec = ladder.get(version)
            try:
                runnable(spec, N, C)
            except ValueError as exc:
                print(f"skip {version} at {N}x{C}: {exc}", file=sys.stderr)
                continue
            for mode in ((False, True) if overwrite and spec.overwrite_mode else (False,)):
                if check:
                    report = (check_overwrite(spec, N, C, seed=N + C + 1) if mode
                              else checking.check_version(spec, N, C, seed=N + C))
                    if not report.ok:
                        raise AssertionError(f"{report.version} is wrong at N={N} C={C}; not timing it:\n{report}")
                rows.append((spec, mode))
        modes = tuple(dict.fromkeys(mode for _, mode in rows)) if ceiling and (N * C) % 8 == 0 else ()
        results += time_shape(N, C, rows, modes, copy_gbps, repeats)
    return results


def time_shape(N: int, C: int, rows, ceiling_modes=(), copy_gbps: float = float("nan"), repeats: int = 50):
    """Time ``rows`` ((rung, overwrite) pairs, or (rung, overwrite, config, name) for a v7_fast variant
    under its own name) at one shape, interleaved: the rows of one dtype share one :class:`DeviceProblem`,
    and the same-bytes ceiling in each of ``ceiling_modes`` joins the bf16 rows on the same buffers. A
    noisy row is timed again alone (:func:`steady`). Returns their Timings."""
    bf16_dtype = np.dtype(bf16.bfloat16)
    rows = [tuple(row) + (None, None) if len(row) == 2 else tuple(row) for row in rows]
    dtypes = list(dict.fromkeys(row[0].dtype for row in rows))
    if ceiling_modes and bf16_dtype not in dtypes:
        dtypes.append(bf16_dtype)
    out = []
    for dtype in dtypes:
        problem = DeviceProblem(N, C, dtype)
        try:
            timed = {}  # name -> (bytes moved, launch(i))
            for spec, mode, config, label in rows:
                if spec.dtype == dtype:
                    L = launch.launcher(spec, C, overwrite=mode, config=config)
                    name = (label + (OVERWRITE_SUFFIX if mode else "")) if label else (
                        overwrite_name(spec) if mode else spec.name)
                    if name in timed:
                        raise ValueError(f"time_shape: two rows are named {name!r}; give a variant its own name")
                    timed[name] = (spec.bytes_moved(N, C, overwrite=mode), lambda i, L=L: L(N, problem.buffers[i]))
            if dtype == bf16_dtype:
                for mode in ceiling_modes:
                    stream = _stream_launcher(accumulate=not mode)
                    timed[STREAM_NAME + (OVERWRITE_SUFFIX if mode else "")] = (
                        ladder.get("v7_fast").bytes_moved(N, C, overwrite=mode),
                        lambda i, stream=stream: stream(problem.buffers[i].dinp, problem.buffers[i].dout,
                                                        problem.buffers[i].inp, N * C))
            if not timed:
                continue
            times = time_interleaved({name: f for name, (_, f) in timed.items()}, sets=problem.sets,
                                     repeats=repeats)
            for name, (nbytes, f) in timed.items():
                again = lambda name=name, nbytes=nbytes, f=f: _timing(  # noqa: E731
                    name, N, C, time_ms(f, sets=problem.sets, repeats=repeats), nbytes, copy_gbps)
                out.append(steady(again, first=_timing(name, N, C, times[name], nbytes, copy_gbps)))
        finally:
            problem.free()
    return out


def runnable(version, N: int, C: int) -> None:
    """Raise ValueError (saying why) when ``version`` cannot run (N, C) on this GPU: its C rule, or more
    shared memory than the device has (static shared memory counted)."""
    spec = ladder.get(version)
    validate.size(spec, N, C)
    validate.shared_memory(spec, C, spec.block_size)
    launch.launcher(spec, C)  # compiles it and checks every launch's shared memory on this device


STREAM_NAME = "stream ceiling"


def _stream_function():
    return build.source_module("stream_ceiling").get_function("stream_elementwise")


#: threads a block of kernels/stream_ceiling.cu's kernels, one 16-byte chunk a thread
STREAM_THREADS = 256


def _stream_launcher(accumulate: bool, stream=None):
    function = _stream_function()

    def launch(out, a, b, n):
        n16 = n // 8
        function(*(np.uintp(int(p)) for p in (out, a, b)), np.int64(n16), np.int32(bool(accumulate)),
                 block=(STREAM_THREADS, 1, 1), grid=(-(-n16 // STREAM_THREADS), 1, 1), stream=stream)
    return launch


def stream_elementwise(out, a, b, n: int, accumulate: bool = True, stream=None):
    """Launch kernels/stream_ceiling.cu on device buffers of ``n`` bf16 each (n % 8 == 0):
    ``out = a * b (+ out)``, the bytes of v7_fast with no reduction."""
    if n % 8:
        raise ValueError(f"n (bf16 elements) must be a multiple of 8 (16-byte chunks), got {n}")
    _stream_launcher(accumulate, stream)(out, a, b, n)


def stream_ceiling(N: int, C: int, copy_gbps: float, overwrite: bool = False, repeats: int = 50) -> Timing:
    """Time the elementwise kernel on (N, C) bf16 tensors rotated through sets larger than L2, counted with
    v7_fast's bytes for the mode: the fraction of copy that no RMSNorm backward with these bytes can beat
    by much (it has no reduction, no barrier, no rows)."""
    if (N * C) % 8:
        raise ValueError(f"N * C must be a multiple of 8 (16-byte chunks), got {N} * {C}")
    drv = gpu.driver()
    nbytes = N * C * 2
    sets = sets_for(3 * nbytes, gpu.facts().l2_bytes, drv.mem_get_info()[0])
    rng = np.random.default_rng(N + C)
    host = [_raw(bf16.to_bf16(rng.standard_normal(N * C))) for _ in range(3)]
    launch = _stream_launcher(accumulate=not overwrite)
    buffers = []
    try:
        for _ in range(sets):
            buffers.append([drv.to_device(h) for h in host])
        times = time_ms(lambda i: launch(*buffers[i], N * C), sets=sets, repeats=repeats)
    finally:
        for trio in buffers:
            for buf in trio:
                buf.free()
    spec = ladder.get("v7_fast")
    return _timing(STREAM_NAME + (OVERWRITE_SUFFIX if overwrite else ""), N, C, times,
                   spec.bytes_moved(N, C, overwrite=overwrite), copy_gbps)


@dataclass(frozen=True)
class Yardstick:
    """The copy bandwidth the bench reports against: the faster of ``cuMemcpyDtoD`` and a plain copy kernel
    (kernels/stream_ceiling.cu's ``stream_copy``), both measured now, bytes read + written."""

    dtod_gbps: float
    kernel_gbps: float

    @property
    def gbps(self) -> float:
        return max(self.dtod_gbps, self.kernel_gbps)

    def __str__(self) -> str:
        return (f"copy {self.gbps:.0f} GB/s (bytes read + written): the faster of cuMemcpyDtoD "
                f"{self.dtod_gbps:.0f} GB/s and a copy kernel {self.kernel_gbps:.0f} GB/s")


def copy_kernel_bandwidth(nbytes: int = 1 << 30, repeats: int = 20) -> float:
    """GB/s (read + written) of ``stream_copy``, 16-byte streaming loads and stores, over ``nbytes``
    (back-to-back launches on the same two buffers, :func:`time_ms`)."""
    drv = gpu.driver()
    function = build.source_module("stream_ceiling").get_function("stream_copy")
    n16 = nbytes // 16
    src, dst = drv.mem_alloc(nbytes), drv.mem_alloc(nbytes)
    try:
        drv.memset_d8(src, 1, nbytes)
        times = time_ms(lambda i: function(dst, src, np.int64(n16), block=(STREAM_THREADS, 1, 1),
                                           grid=(-(-n16 // STREAM_THREADS), 1, 1)), warmup=3, repeats=repeats)
        return 2 * nbytes / (statistics.median(times) * 1e-3) / 1e9
    finally:
        src.free()
        dst.free()


def copy_yardstick() -> Yardstick:
    """Both copies, measured now (:class:`Yardstick`)."""
    return Yardstick(gpu.copy_bandwidth(), copy_kernel_bandwidth())


def fit_fixed_cost(ns, ms) -> tuple[float, float]:
    """Least squares ``ms = fixed + N * per_row`` over a sweep of N at one C: (fixed in us, ns per row).
    The fixed part is what a launch costs whatever its size (ramp, tail, final sum)."""
    ns, ms = np.asarray(ns, float), np.asarray(ms, float)
    if len(ns) < 2 or np.ptp(ns) == 0:
        raise ValueError("fit_fixed_cost needs at least two different N")
    per_row, fixed = np.polyfit(ns, ms, 1)
    return float(fixed * 1e3), float(per_row * 1e6)


def table(results, baseline: str | None = None, overwriting=()) -> str:
    """A text table: time, GB/s, % of copy, % of the same-bytes ceiling (where ``results`` hold ceiling
    rows: :func:`ceiling_for`) and (optionally) speedup over ``baseline`` at each shape. A noisy row
    (:attr:`Timing.noisy`) is marked ``~``."""
    base = {(r.N, r.C): r.ms for r in results if r.name == baseline}
    ceilings = any(r.name.startswith(STREAM_NAME) for r in results)
    width = max([16] + [len(r.name) + 1 for r in results])  # a long name ("stream ceiling (dinp=)") widens it
    lines = [f"{'version':<{width}}{'N x C':>14}{'ms':>10}{'GB/s':>9}{'% copy':>8}" + ("  % ceil" if ceilings else "")
             + ("  speedup" if base else "")]
    for r in results:
        row = f"{r.name:<{width}}{f'{r.N}x{r.C}':>14}{r.ms:>10.4f}{r.gbps:>9.0f}{100 * r.fraction_of_copy:>7.1f}%"
        if ceilings:
            top = ceiling_for(results, r, overwriting)
            row += f"  {100 * r.gbps / top.gbps:5.1f}%" if top is not None else " " * 8
        if base and (r.N, r.C) in base:
            row += f"  {base[(r.N, r.C)] / r.ms:6.2f}x"
        if r.noisy:
            row += "  ~"
        lines.append(row)
    return "\n".join(lines)


def ceiling_for(results, row: Timing, overwriting=()) -> Timing | None:
    """The same-bytes ceiling row (:func:`stream_ceiling`) among ``results`` at ``row``'s shape and mode:
    overwrite mode for rows named ``... (dinp=)`` and for the names in ``overwriting`` (the peers, which
    write dinp), accumulate mode for the others; None where there is none."""
    if row.name.startswith(STREAM_NAME):
        return None
    overwrite = row.name.endswith(OVERWRITE_SUFFIX) or row.name in overwriting
    name = STREAM_NAME + (OVERWRITE_SUFFIX if overwrite else "")
    return next((r for r in results if r.name == name and (r.N, r.C) == (row.N, row.C)), None)


def records(results, baseline: str | None = "v6_last_block", overwriting=()) -> list[dict]:
    """Every row as a dict (for JSON): the :class:`Timing` fields, ``percent_of_copy``,
    ``percent_of_ceiling`` (its GB/s over the same-bytes ceiling's at its shape and mode, where
    ``results`` hold one: :func:`ceiling_for`; else None), ``noisy`` and ``speedup_over_<baseline>`` (the
    baseline's time over the row's at the same shape; None without one)."""
    base = {(r.N, r.C): r.ms for r in results if r.name == baseline}
    rows = []
    for r in results:
        d = r.as_dict()
        d["percent_of_copy"] = 100 * r.fraction_of_copy
        top = ceiling_for(results, r, overwriting)
        d["percent_of_ceiling"] = 100 * r.gbps / top.gbps if top is not None else None
        d["noisy"] = r.noisy
        if baseline:
            key = "speedup_over_" + ("v6" if baseline == "v6_last_block" else baseline)
            d[key] = base[(r.N, r.C)] / r.ms if (r.N, r.C) in base else None
        rows.append(d)
    return rows


def by_shape(results) -> list:
    """The rows grouped by shape, in the order the shapes first appear (stable within a shape)."""
    order = {}
    for r in results:
        order.setdefault((r.N, r.C), len(order))
    return sorted(results, key=lambda r: order[(r.N, r.C)])


def against(results, name: str, others) -> str:
    """One line per shape: ``name``'s time against the fastest of ``others`` (time ratio > 1: faster)."""
    others = list(others)
    lines = []
    for N, C in dict.fromkeys((r.N, r.C) for r in results):
        mine = next((r for r in results if r.name == name and (r.N, r.C) == (N, C)), None)
        theirs = [r for r in results if r.name in others and (r.N, r.C) == (N, C)]
        if mine is None or not theirs:
            continue
        best = min(theirs, key=lambda r: r.ms)
        verdict = "faster" if mine.ms < best.ms else "SLOWER"
        lines.append(f"{f'{N}x{C}':>12}  {name} {mine.ms:.4f} ms vs {best.name} {best.ms:.4f} ms: "
                     f"{best.ms / mine.ms:.2f}x ({verdict})")
    return "\n".join(lines)
