"""The bench: every version checked, then timed at every shape, and the reports of what was timed.

The timing itself (bursts behind a sleeping kernel, buffer sets larger than L2, the median) is
:mod:`rmsnorm_lessons.speed.timing`; its names are importable from here too. Bandwidth is the bytes
a rung must move (:meth:`rmsnorm_lessons.core.ladder.rung.Rung.bytes_moved`) over the median time,
reported against the copy bandwidth measured in the same process (:func:`copy_yardstick`) and, where
timed, against the same-bytes ceiling (:func:`stream_ceiling`).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np

from ..core import bf16, build, compare, gpu, ladder, launch, validate
from ..inspection import nsight
from .timing import (  # noqa: F401 (the timing loop's names, re-exported for bench.X callers)
    BURST,
    MAX_SLEEP_US,
    MIN_SETS,
    NOISY_SPREAD,
    SLEEP_US,
    DeviceProblem,
    Timing,
    _raw,
    _sleep,
    _timing,
    rotation,
    sets_for,
    steady,
    time_interleaved,
    time_ms,
)

#: the shapes of the issue's benchmark (N, C): six above L2, two latency-bound
LARGE_SHAPES = [(32768, 768), (32768, 1024), (16384, 2048), (16384, 4096), (8192, 8192),
                (4096, 16384)]
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


OVERWRITE_SUFFIX = " (dinp=)"


def overwrite_name(version) -> str:
    """The name of a version's row when it runs in overwrite mode (dinp =, dinp not read)."""
    return f"{ladder.get(version).name}{OVERWRITE_SUFFIX}"


def bench_version(version, N: int, C: int, copy_gbps: float, repeats: int = 50, problem=None, *,
                  overwrite: bool = False, config=None, block_size: int | None = None,
                  name: str | None = None) -> Timing:
    """Time one version at one shape (inputs rotated among buffer sets larger than L2).

    ``overwrite``: time the overwrite mode (dinp =), counting the bytes that mode moves; ``config``:
    v7's variants (:class:`~rmsnorm_lessons.core.ladder.v7_fast.Config`); ``name``: the row's name
    (default: the version's, with `` (dinp=)`` in overwrite mode).
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



def check_overwrite(version, N: int, C: int, seed=0, inputs=None):
    """Run ``version`` in overwrite mode on random inputs (dinp starting non-zero) and compare with
    the float64 gradient alone (dinp) and the accumulated dweight: a :class:`compare.CheckReport`.
    ``inputs``: a shared :class:`check.Inputs`."""
    return compare.check_version(version, N, C, seed=seed, overwrite=True, inputs=inputs)


def sweep(versions=None, shapes=None, repeats: int = 50, check: bool = True,
          copy_gbps: float | None = None,
          overwrite: bool = False, ceiling: bool = False, show_progress: bool = True,
          inputs: dict | None = None):
    """Check (optionally) and time every version at every shape; the copy yardstick measured first.

    Returns a list of :class:`Timing`, shape by shape; a version that cannot run a shape (its C
    rule, its shared memory) is left out and reported on stderr. With ``overwrite``, versions that
    offer the overwrite mode get a second row in that mode (named by :func:`overwrite_name`),
    checked in that mode first. With ``ceiling``, each shape also gets the same-bytes ceiling
    (:func:`stream_ceiling`'s kernel) in each mode timed there, as rows of its own
    (``percent_of_ceiling`` in :func:`records` reads them). The rows of a shape are timed
    interleaved (:func:`time_interleaved`) on shared buffer sets; a row whose spread is above
    :data:`NOISY_SPREAD` is then timed again alone (:func:`steady`). ``show_progress``: a progress
    bar over the shapes. ``inputs``: a dict ``{(N, C, dtype): check.Inputs}`` the checks take their
    problems from and add to (the peers' sweep can then check on the same problem).
    """
    versions = list(versions or ladder.VERSIONS)
    inputs = {} if inputs is None else inputs
    shapes = list(shapes or SHAPES)
    copy_gbps = copy_gbps or copy_yardstick().gbps
    results = []
    for N, C in (progress(shapes, total=len(shapes), desc="bench") if show_progress else shapes):
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
                    report = compare.check_version(spec, N, C, overwrite=mode,
                                                    inputs=shape_inputs(inputs, N, C, spec.dtype))
                    if not report.ok:
                        raise AssertionError(f"{report.version} is wrong at N={N} C={C}; not "
                                             f"timing it:\n{report}")
                rows.append((spec, mode))
        same_bytes = ceiling and (N * C) % 8 == 0
        modes = tuple(dict.fromkeys(mode for _, mode in rows)) if same_bytes else ()
        results += time_shape(N, C, rows, modes, copy_gbps, repeats)
    return results


def shape_inputs(inputs: dict, N: int, C: int, dtype) -> compare.Inputs:
    """The problem and references of one shape and dtype from ``inputs`` (one per shape and dtype,
    shared by every rung's check, in both modes, and by the peers'), made on first use."""
    key = (N, C, np.dtype(dtype))
    if key not in inputs:
        inputs[key] = compare.Inputs(N, C, dtype, seed=N + C)
    return inputs[key]


def time_shape(N: int, C: int, rows, ceiling_modes=(), copy_gbps: float = float("nan"),
               repeats: int = 50):
    """Time ``rows`` ((rung, overwrite) pairs, or (rung, overwrite, config, name) for a v7_fast
    variant under its own name) at one shape, interleaved: the rows of one dtype share one
    :class:`DeviceProblem`, and the same-bytes ceiling in each of ``ceiling_modes`` joins the bf16
    rows on the same buffers. A noisy row is timed again alone (:func:`steady`). Returns their
    Timings."""
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
                        raise ValueError(f"time_shape: two rows are named {name!r}; give a variant "
                                         "its own name")
                    timed[name] = (spec.bytes_moved(N, C, overwrite=mode), lambda i, L=L: L(N,
                            problem.buffers[i]))
            if dtype == bf16_dtype:
                for mode in ceiling_modes:
                    stream = _stream_launcher(accumulate=not mode)
                    timed[STREAM_NAME + (OVERWRITE_SUFFIX if mode else "")] = (
                        ladder.get("v7_fast").bytes_moved(N, C, overwrite=mode),
                        lambda i, stream=stream: stream(problem.buffers[i].dinp,
                                                        problem.buffers[i].dout,
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
    """Raise ValueError (saying why) when ``version`` cannot run (N, C) on this GPU: its C rule, or
    more shared memory than the device has (static shared memory counted)."""
    spec = ladder.get(version)
    validate.size(spec, N, C)
    validate.shared_memory(spec, C, spec.block_size)
    launch.launcher(spec, C)  # compiles it and checks every launch's shared memory on this device


#: the share of copy from which what is left of a kernel after an ablation reads as memory-bound:
#: the course's one line (nsight.MEMORY_BOUND_PCT, Nsight Compute's, of DRAM's peak), here against
#: the measured copy, which is below the peak, so a little stricter
MEMORY_BOUND_OF_COPY = nsight.MEMORY_BOUND_PCT / 100


def ablation(version, remove: str, N: int, C: int, copy_gbps: float, repeats: int = 20) -> Timing:
    """Time ``version`` with one statement of its kernel removed (``remove``, which must stand in
    its source exactly once): what the rest costs. Its results are wrong by construction, so it is
    timed unchecked and never registered: a measurement, not a kernel."""
    spec = ladder.get(version)
    text = build.kernel_text(spec)[1]
    found = text.count(remove) if isinstance(remove, str) else 0
    if found != 1:
        raise ValueError(f"remove must be a statement found exactly once in {spec.name}'s kernel, "
                         f"got {remove!r} ({found} times)")
    # what the removed statement used is now unused: nvcc's warnings about it (177: declared but
    # never referenced, 550: set but never used) would print above the lesson's figures
    quiet = "#pragma nv_diag_suppress 177\n#pragma nv_diag_suppress 550\n"
    source = quiet + text.replace(remove, "/* removed for the ablation */")
    rest = ladder.rung_from_source(name=f"{spec.name}_ablated", like=spec, source=source,
                                   register_it=False)
    return bench_version(rest, N, C, copy_gbps, repeats=repeats,
                         name=f"{spec.name} without {remove.strip()}")


def bound_after_ablation(whole: Timing, rest: Timing, removed: str) -> str:
    """What bounds a kernel, read from an ablation: ``removed`` (a :data:`predict.BOUNDS` word,
    e.g. ``"atomics"``) where taking it out saves at least half the time; else ``"memory"`` where
    what is left moves at least :data:`MEMORY_BOUND_OF_COPY` of copy, else ``"latency"``."""
    if rest.ms <= 0.5 * whole.ms:
        return removed
    return "memory" if rest.fraction_of_copy >= MEMORY_BOUND_OF_COPY else "latency"


STREAM_NAME = "stream ceiling"


def _stream_function():
    return build.source_module("stream_ceiling").get_function("stream_elementwise")


#: threads a block of kernels/stream_ceiling.cu's kernels, one 16-byte chunk a thread
STREAM_THREADS = 256


def _stream_launcher(accumulate: bool, stream=None):
    function = _stream_function()

    def launch(out, a, b, n):
        n16 = n // 8
        function(*(np.uintp(int(p)) for p in (out, a, b)), np.int64(n16),
                 np.int32(bool(accumulate)),
                 block=(STREAM_THREADS, 1, 1), grid=(-(-n16 // STREAM_THREADS), 1, 1),
                 stream=stream)
    return launch


def stream_elementwise(out, a, b, n: int, accumulate: bool = True, stream=None):
    """Launch kernels/stream_ceiling.cu on device buffers of ``n`` bf16 each (n % 8 == 0):
    ``out = a * b (+ out)``, the bytes of v7_fast with no reduction."""
    if n % 8:
        raise ValueError(f"n (bf16 elements) must be a multiple of 8 (16-byte chunks), got {n}")
    _stream_launcher(accumulate, stream)(out, a, b, n)


def stream_ceiling(N: int, C: int, copy_gbps: float, overwrite: bool = False,
                   repeats: int = 50) -> Timing:
    """Time the elementwise kernel on (N, C) bf16 tensors rotated through sets larger than L2,
    counted with v7_fast's bytes for the mode: the fraction of copy that no RMSNorm backward with
    these bytes can beat by much (it has no reduction, no barrier, no rows)."""
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
    """The copy bandwidth the bench reports against: the faster of ``cuMemcpyDtoD`` and a plain copy
    kernel (kernels/stream_ceiling.cu's ``stream_copy``), both measured now, bytes read +
    written."""

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
    function = build.source_module("stream_ceiling").get_function("stream_copy")
    n16 = nbytes // 16

    def timed(dst, src):
        return time_ms(lambda i: function(dst, src, np.int64(n16), block=(STREAM_THREADS, 1, 1),
                                          grid=(-(-n16 // STREAM_THREADS), 1, 1)),
                       warmup=3, repeats=repeats)
    return gpu.copy_bandwidth(nbytes, timed=timed)


def copy_yardstick() -> Yardstick:
    """Both copies, measured now (:class:`Yardstick`)."""
    return Yardstick(gpu.copy_bandwidth(), copy_kernel_bandwidth())


def fit_fixed_cost(ns, ms) -> tuple[float, float]:
    """Least squares ``ms = fixed + N * per_row`` over a sweep of N at one C: (fixed in us, ns per
    row). The fixed part is what a launch costs whatever its size (ramp, tail, final sum)."""
    ns, ms = np.asarray(ns, float), np.asarray(ms, float)
    if len(ns) < 2 or np.ptp(ns) == 0:
        raise ValueError("fit_fixed_cost needs at least two different N")
    per_row, fixed = np.polyfit(ns, ms, 1)
    return float(fixed * 1e3), float(per_row * 1e6)


def table(results, baseline: str | None = None, overwriting=(), width: int | None = None,
          header: bool = True) -> str:
    """A text table: time, GB/s, % of copy, % of the same-bytes ceiling (where ``results`` hold
    ceiling rows: :func:`ceiling_for`) and (optionally) speedup over ``baseline`` at each shape. A
    noisy row (:attr:`Timing.noisy`) is marked ``~``, one measured while a workshop room's GPU was
    shared (:attr:`Timing.gpu`) ``(GPU shared)``. ``width`` fixes the name column (tables
    printed a shape at a time line up); ``header=False`` leaves out the header line."""
    base = {(r.N, r.C): r.ms for r in results if r.name == baseline}
    ceilings = any(r.name.startswith(STREAM_NAME) for r in results)
    # a long name ("stream ceiling (dinp=)") widens it
    width = max([16, width or 0] + [len(r.name) + 1 for r in results])
    lines = [f"{'version':<{width}}{'N x C':>14}{'ms':>10}{'GB/s':>9}{'% copy':>8}"
             + ("  % ceil" if ceilings else "") + ("  speedup" if base else "")][:int(header)]
    for r in results:
        row = (f"{r.name:<{width}}{f'{r.N}x{r.C}':>14}{r.ms:>10.4f}{r.gbps:>9.0f}"
               f"{100 * r.fraction_of_copy:>7.1f}%")
        if ceilings:
            top = ceiling_for(results, r, overwriting)
            row += f"  {100 * r.gbps / top.gbps:5.1f}%" if top is not None else " " * 8
        if base and (r.N, r.C) in base:
            row += f"  {base[(r.N, r.C)] / r.ms:6.2f}x"
        if r.noisy:
            row += "  ~"
        if r.gpu == "shared":  # a room's GPU, not had alone (speed/gpu_turn.py)
            row += "  (GPU shared)"
        lines.append(row)
    return "\n".join(lines)


def ceiling_for(results, row: Timing, overwriting=()) -> Timing | None:
    """The same-bytes ceiling row (:func:`stream_ceiling`) among ``results`` at ``row``'s shape and
    mode: overwrite mode for rows named ``... (dinp=)`` and for the names in ``overwriting`` (the
    peers, which write dinp), accumulate mode for the others; None where there is none."""
    if row.name.startswith(STREAM_NAME):
        return None
    overwrite = row.name.endswith(OVERWRITE_SUFFIX) or row.name in overwriting
    name = STREAM_NAME + (OVERWRITE_SUFFIX if overwrite else "")
    return next((r for r in results if r.name == name and (r.N, r.C) == (row.N, row.C)), None)


def records(results, baseline: str | None = "v6_last_block", overwriting=()) -> list[dict]:
    """Every row as a dict (for JSON): the :class:`Timing` fields, ``percent_of_copy``,
    ``percent_of_ceiling`` (its GB/s over the same-bytes ceiling's at its shape and mode, where
    ``results`` hold one: :func:`ceiling_for`; else None), ``noisy`` and ``speedup_over_<baseline>``
    (the baseline's time over the row's at the same shape; None without one)."""
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
    """One line per shape: ``name``'s time against the fastest of ``others`` (time ratio > 1:
    faster)."""
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
