"""Nsight Compute (``ncu``) on one launch of a rung: DRAM throughput and bytes, achieved occupancy,
warp stall reasons, global load efficiency, L2 atomic sectors, shared-memory bank conflicts.

:func:`profile` starts ``ncu --clock-control none --csv --page raw --metrics ... --kernel-name K
--launch-skip 1 --launch-count 1 python -m rmsnorm_lessons.inspection.nsight --launch VERSION N C``:
the child calls the rung twice (the first call compiles and warms up; ncu profiles the second) and
ncu prints one CSV row per profiled kernel. :func:`~rmsnorm_lessons.inspection.nsight_csv.parse_csv`
reads that CSV (the raw page: a header of metric names, a row of units, a row per kernel; the
details page's long form too) and :func:`profile` returns a :class:`Profile`
(:mod:`~rmsnorm_lessons.inspection.nsight_profile`): the numbers the lessons need. A learner's rung,
a ``config`` or ``overwrite`` go to the child as a job (:func:`rmsnorm_lessons.core.child.run_job`,
which rebuilds a learner's rung there), and so does a :class:`Probe`, a lesson's kernel that is not
a rung. :func:`diff` sets two profiles of one shape side by side.

ncu refuses a whole call when it does not know one metric name: :func:`usable_metrics` asks ``ncu
--query-metrics`` once per process which of the extra metrics it knows, and a call refused for a
metric is made once more without it. A figure ncu did not give is None ("not measured by this
ncu"); the first four (duration, DRAM %, occupancy, stalls) are always asked for.

``--clock-control none`` keeps the GPU's own clocks (ncu otherwise locks them to base clocks, and on
some virtual machines it may not). ncu needs a GPU and permission to read its performance counters;
without either the error says which.

:func:`reading` is the course's one rule for memory- against latency-bound (:func:`rule` states
it); the lessons call it through :func:`rmsnorm_lessons.course.profiles.bottleneck`, which also
shows the saved output of the same call where there is no GPU.
"""
from __future__ import annotations

import importlib
import numbers
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from ..core import build, child
from .nsight_csv import ProfileError, parse_csv  # noqa: F401 (nsight.X callers)
from .nsight_diff import ProfileDiff, diff  # noqa: F401 (nsight.X callers)
from .nsight_profile import (  # noqa: F401 (nsight.X callers)
    BASE,
    DRAM,
    DURATION,
    EXTRA,
    NOT_MEASURED,
    OCCUPANCY,
    STALLS,
    Profile,
    base_name,
    to_profile,
)

#: every metric a profile asks for, where this ncu knows it (:func:`usable_metrics`)
METRICS = BASE + tuple(metric for metric, _ in EXTRA.values())
NOT_FOUND = ("ncu (Nsight Compute) was not found on PATH, under CUDA_HOME or in "
             "/usr/local/cuda/bin")


def find() -> str | None:
    """The ncu executable: where :func:`rmsnorm_lessons.core.build.find_tool` looks, then the newest
    of NVIDIA's standalone installs (``/opt/nvidia/nsight-compute/<version>/ncu``), or None."""
    found = build.find_tool("ncu")
    if found:
        return found
    installs = sorted(Path("/opt/nvidia/nsight-compute").glob("*/ncu"),
                      key=lambda p: [int(x) if x.isdigit() else 0
                                     for x in p.parent.name.split(".")])
    return str(installs[-1]) if installs else None


@dataclass(frozen=True, init=False)
class Probe:
    """A kernel that is not a rung, profiled as a lesson launches it: ``Probe("lesson09",
    "scale_f128_x4", 2)``. The lesson's home has a module ``probe`` whose ``launch(kernel, N, C,
    *args, launches=2)`` launches ``kernel`` ``launches`` times on N x C elements (ncu profiles the
    second launch); ``args`` are the lesson's own (lesson 09: blocks per SM)."""

    lesson: str
    kernel: str
    args: tuple

    def __init__(self, lesson: str, kernel: str, *args):
        if not isinstance(lesson, str) or not re.fullmatch(r"lesson\d\d", lesson):
            raise ValueError(f"lesson must name a lesson's home (lessonNN), got {lesson!r}")
        if not isinstance(kernel, str) or not kernel.isidentifier():
            raise ValueError(f"kernel must be the kernel's name, got {kernel!r}")
        if not all(isinstance(a, (int, float, str)) for a in args):
            raise TypeError(f"a probe's arguments must be numbers or strings, got {args!r}")
        object.__setattr__(self, "lesson", lesson)
        object.__setattr__(self, "kernel", kernel)
        object.__setattr__(self, "args", tuple(args))

    @property
    def name(self) -> str:
        return self.kernel

    @property
    def module(self) -> str:
        return f"rmsnorm_lessons.lessons.{self.lesson}.probe"


def table(profiles) -> str:
    """One line per profile: time, DRAM throughput, achieved occupancy and the top three stall
    reasons."""
    lines = [f"{'version':<14} {'kernel':<22} {'N x C':>11} {'time us':>8} {'DRAM %':>7} "
             f"{'occup. %':>8}  "
             f"top stall reasons (share of stalls)"]
    for p in profiles:
        def f(v, spec):
            return format(v, spec) if v is not None else "n/a"
        top = ", ".join(f"{r} {share:.0f} %" for r, _, share in p.top_stalls())
        lines.append(f"{p.version:<14} {p.kernel:<22} {f'{p.shape[0]}x{p.shape[1]}':>11} "
                     f"{f(p.duration_us, '8.1f'):>8} {f(p.dram_pct, '7.1f'):>7} "
                     f"{f(p.occupancy_pct, '8.1f'):>8}  {top}")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------
# reading a profile: the course's one rule

#: DRAM throughput, % of its peak, from which a launch reads as memory-bound. Nsight Compute's own
#: Speed Of Light rule draws the same line: throughput "below 60.0% of peak typically indicate[s]
#: latency issues". ncu's peak is the memory's theoretical one, which no kernel reaches, so the line
#: is well below 100 %.
MEMORY_BOUND_PCT = 60.0
#: the top stall reason's share of all stalls from which the warps are "mostly" waiting on it
MOSTLY_PCT = 50.0
#: what a warp stalled for that reason waits on (ncu's Profiling Guide, "Warp Stall Reasons")
WAITS_ON = {"long_scoreboard": "global loads", "short_scoreboard": "shared memory, special math",
            "barrier": "__syncthreads", "membar": "a memory fence", "wait": "fixed latencies",
            "mio_throttle": "shared-memory queue full", "lg_throttle": "global-memory queue full",
            "math_pipe_throttle": "a busy math pipe", "not_selected": "another warp issued",
            "drain": "stores at exit", "no_instruction": "instruction fetch",
            "branch_resolving": "a branch", "dispatch_stall": "dispatch"}


def rule() -> str:
    """The rule :func:`reading` applies, in words, with its thresholds."""
    line = f"{MEMORY_BOUND_PCT:.0f} %"
    return "\n".join([
        f"memory-bound   DRAM throughput at or above {line} of its peak: DRAM is busy most of",
        "               the launch; only moving fewer bytes makes it faster",
        f"latency-bound  DRAM throughput below {line} of its peak: DRAM idles while warps wait;",
        "               the reading names what they wait on: the top stall reason where it holds",
        f"               at least {MOSTLY_PCT:.0f} % of the stalls, else the top two; and the "
        "achieved",
        "               occupancy, the warps there are to hide the wait"])


def _pct(value: float) -> str:
    # more decimals where rounding would put a value below the line on it
    for digits in (0, 1, 2):
        text = f"{value:.{digits}f}"
        if not value < MEMORY_BOUND_PCT <= float(text):
            break
    return text


def _stall(reason: str, share: float, of: str = "") -> str:
    means = WAITS_ON.get(reason)
    return f"{reason} ({means + ', ' if means else ''}{share:.0f} %{of})"


def reading(p: Profile) -> str:
    """One line saying what bounds the profiled launch, by :func:`rule`.

    ``memory-bound`` where DRAM throughput is at or above :data:`MEMORY_BOUND_PCT` % of its peak:
    the threshold of Nsight Compute's own Speed Of Light rule, below which it reports "latency
    issues". Else ``latency-bound``, naming what the warps wait on (the top stall reason, "mostly"
    where it holds at least :data:`MOSTLY_PCT` % of the stalls, else the top two) and the achieved
    occupancy (how many warps there are to hide the wait). DRAM alone decides: stall reasons say
    why warps wait, not whether DRAM is the limit (a memory-bound kernel's warps wait on loads
    too). It reads one launch; the timing beside it says whether a change helped.
    """
    if p.dram_pct is None:
        return "no reading: ncu reported no DRAM throughput for this launch"
    dram = f"DRAM at {_pct(p.dram_pct)} % of its peak"
    if p.dram_pct >= MEMORY_BOUND_PCT:
        return f"memory-bound: {dram}"
    top = p.top_stalls(2)
    if not top:
        waits = "stall reasons not reported"
    elif top[0][2] >= MOSTLY_PCT or len(top) == 1:
        waits = "warps mostly waiting on " + _stall(top[0][0], top[0][2], " of stalls")
    else:
        waits = ("warps waiting on " + _stall(top[0][0], top[0][2], " of stalls") + " and "
                 + _stall(top[1][0], top[1][2]))
    occupancy = ("" if p.occupancy_pct is None
                 else f" at {p.occupancy_pct:.0f} % achieved occupancy")
    return f"latency-bound: {dram}, {waits}{occupancy}"


# --------------------------------------------------------------------------------------------------
# running ncu on a child process


def command(ncu: str, version: str, N: int, C: int, kernel: str | None = None,
            metrics=METRICS) -> list[str]:
    """The ncu command line: profile the second launch of ``kernel`` (by default the main kernel the
    plan launches at this shape: v7_fast's depends on C)."""
    from ..core import ladder

    rung = ladder.get(version)
    if kernel is None:
        kernel = ladder.plan(rung, N, C)[0].kernel
    if kernel not in rung.kernels:
        raise ValueError(f"{version} has no kernel {kernel!r}; its kernels: "
                         f"{', '.join(rung.kernels)}")
    return child.command(["-m", "rmsnorm_lessons.inspection.nsight", "--launch", rung.name, N, C],
                         wrapper(ncu, kernel, metrics))


def wrapper(ncu: str, kernel: str, metrics=METRICS) -> list[str]:
    """ncu's part of the command: the metrics, the kernel, its second launch."""
    return [ncu, "--clock-control", "none", "--csv", "--page", "raw", "--metrics",
            ",".join(metrics), "--kernel-name", kernel, "--launch-skip", "1", "--launch-count", "1"]


def explain_failure(output: str, returncode) -> str:
    """A sentence for a run that gave no result."""
    if "ERR_NVGPUCTRPERM" in output:
        return ("ncu may not read this GPU's performance counters (ERR_NVGPUCTRPERM): the driver "
                "allows it "
                "to administrators only; see https://developer.nvidia.com/ERR_NVGPUCTRPERM")
    errors = [ln.strip() for ln in output.splitlines() if ln.startswith("==ERROR==")]
    if errors:
        return "ncu failed: " + " ".join(errors[:3])
    if "No kernels were profiled" in output:
        return ("ncu profiled no kernel: the kernel name did not match, or the program launched "
                "nothing")
    tail = " ".join(output.strip().splitlines()[-3:])[-300:]
    return f"ncu gave no result (exit {returncode}): {tail}"


# --------------------------------------------------------------------------------------------------
# which metrics this ncu knows: ncu refuses a whole call for one name it does not know

_KNOWN: dict = {}  # ncu path -> the base metric names it lists, or None where it would not say
_REJECTED: dict = {}  # ncu path -> metrics a call refused (asked no more in this process)
_METRIC_NAME = re.compile(r"^\s*([a-z0-9]+__[a-z0-9_]+)\b")


def known_metrics(ncu: str):
    """The base metric names ``ncu --query-metrics`` lists for this GPU (asked once per process),
    or None where it lists none (no device, an old ncu)."""
    if ncu not in _KNOWN:
        done = child.run([ncu, "--query-metrics"], timeout=120)
        names = set()
        if done.returncode == 0:
            names = {m.group(1) for m in map(_METRIC_NAME.match, done.stdout.splitlines()) if m}
        _KNOWN[ncu] = frozenset(names) or None
    return _KNOWN[ncu]


def usable_metrics(ncu: str) -> tuple:
    """:data:`METRICS` less the extra ones this ncu does not know (or refused before)."""
    known = known_metrics(ncu)
    refused = _REJECTED.get(ncu, set())
    return BASE + tuple(m for m in METRICS[len(BASE):]
                        if m not in refused and (known is None or base_name(m) in known))


def rejected(output: str, asked) -> set:
    """The extra metrics a failed call's errors name (all of them where an error is about a metric
    without naming one of ours); empty where the failure is not about metrics."""
    errors = [ln for ln in output.splitlines() if ln.startswith("==ERROR==")]
    extra = [m for m in asked if m not in BASE]
    named = {m for m in extra if any(base_name(m) in e for e in errors)}
    if named:
        return named
    return set(extra) if any("metric" in e.lower() for e in errors) else set()


# --------------------------------------------------------------------------------------------------
# profiling one launch

LAUNCH_JOB = "rmsnorm_lessons.inspection.nsight:launch_job"
PROBE_JOB = "rmsnorm_lessons.inspection.nsight:launch_probe"


def _attempt(ncu, target, N, C, kernel, metrics, config, overwrite, timeout) -> child.Finished:
    from ..core import ladder

    if isinstance(target, Probe):
        kwargs = dict(lesson=target.lesson, kernel=target.kernel, N=N, C=C, args=target.args)
        return child.run_job(PROBE_JOB, kwargs, wrapper(ncu, kernel, metrics), timeout)[0]
    shipped = any(target is r for r in ladder.SHIPPED)
    if shipped and config is None and not overwrite:  # the command lesson 13 prints
        return child.run(command(ncu, target.name, N, C, kernel, metrics), timeout=timeout)
    kwargs = dict(rung=target.name if shipped else target, N=N, C=C, config=config,
                  overwrite=overwrite)
    return child.run_job(LAUNCH_JOB, kwargs, wrapper(ncu, kernel, metrics), timeout)[0]


def profile(target, N: int, C: int, kernel: str | None = None, *, config=None,
            overwrite: bool = False, timeout: float = 300) -> Profile:
    """ncu on the second launch of ``kernel`` of ``target`` at (N, C): a :class:`Profile`.

    ``target``: a rung's name, a :class:`~rmsnorm_lessons.core.ladder.Rung` (a learner's
    registered one too: the child rebuilds it from its text) or a :class:`Probe`. ``config`` and
    ``overwrite`` as :func:`rmsnorm_lessons.core.run.run` takes them. The extra metrics this ncu
    does not know are left out (their fields None, "not measured by this ncu"); a call refused for
    a metric is made once more without it."""
    target, kernel = checked(target, N, C, kernel, config=config, overwrite=overwrite,
                             resolve=True)
    N, C = int(N), int(C)
    ncu = find()
    if ncu is None:
        raise ProfileError(f"{NOT_FOUND}; it comes with the CUDA toolkit, and profiling needs "
                           "a GPU")
    metrics = usable_metrics(ncu)
    for attempt in range(2):
        done = _attempt(ncu, target, N, C, kernel, metrics, config, overwrite, timeout)
        if done.timed_out:
            raise ProfileError(f"ncu did not finish within {timeout} s on {target.name} at "
                               f"{N}x{C}")
        found = parse_csv(done.stdout)
        if done.returncode == 0 and found:
            return to_profile(found[-1], target.name, (N, C), asked=metrics)
        drop = rejected(done.output, metrics) if attempt == 0 else set()
        if not drop:
            break
        _REJECTED.setdefault(ncu, set()).update(drop)
        metrics = tuple(m for m in metrics if m not in drop)
    raise ProfileError(explain_failure(done.stdout + "\n" + done.stderr, done.returncode))


def _whole(name, value, what):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} ({what}) must be an int, got {type(value).__name__} {value!r}")
    if value < 1:
        raise ValueError(f"{name} ({what}) must be at least 1 (ncu profiles one launch), got "
                         f"{value}")


def checked(version, N, C, kernel=None, *, config=None, overwrite: bool = False,
            resolve: bool = False):
    """The rung of ``version`` (or the :class:`Probe`) once N, C, ``kernel``, ``config`` and
    ``overwrite`` pass the package's rules (before any launch): TypeError or ValueError naming the
    argument and the rule. ``resolve``: return ``(target, kernel)``, the kernel the plan launches
    first where none is named."""
    from ..core import ladder, validate

    for name, value, what in (("N", N, "rows"), ("C", C, "columns")):
        _whole(name, value, what)
    if isinstance(version, Probe):
        if kernel not in (None, version.kernel):
            raise ValueError(f"kernel must be the probe's ({version.kernel}) or None, got "
                             f"{kernel!r}")
        if config is not None or overwrite:
            raise ValueError("a probe takes no config and no overwrite: its lesson launches it")
        return (version, version.kernel) if resolve else version
    rung = ladder.get(version)
    validate.size(rung, int(N), int(C))
    validate.shared_memory(rung, int(C), rung.block_size)
    if kernel is not None and kernel not in rung.kernels:
        raise ValueError(f"kernel must be one of {rung.name}'s kernels ({', '.join(rung.kernels)}) "
                         f"or None, got {kernel!r}")
    launches = ladder.plan(rung, int(N), int(C), config=config, overwrite=overwrite)
    if not resolve:
        return rung
    return rung, kernel if kernel is not None else launches[0].kernel


# --------------------------------------------------------------------------------------------------
# the child: calls one rung twice (the first call compiles and warms up; ncu profiles the second)


def launch(version: str, N: int, C: int, launches: int = 2) -> None:
    child.run_rung(version, N, C, calls=launches)


def launch_job(rung, N: int, C: int, config=None, overwrite: bool = False,
               launches: int = 2) -> dict:
    """A child job (:func:`rmsnorm_lessons.core.child.run_job`): call ``rung`` ``launches`` times
    at (N, C) with ``config`` and ``overwrite`` (a learner's rung from the parent's build)."""
    from ..core import gpu, ladder, reference
    from ..core.run import run

    gpu.require()
    rung = ladder.get(rung)
    if rung.source is not None:
        child.use_the_parents_build(rung)
    p = reference.random_problem(N, C, rung.dtype, seed=0)
    dinp, dweight = p["dinp"], p["dweight"]
    for _ in range(launches):
        dinp, dweight = run(rung, p["dout"], p["inp"], p["weight"], p["rstd"], dinp, dweight,
                            overwrite=overwrite, config=config)
    return {"line": f"child: {rung.name} N={N} C={C}: {launches} calls done"}


def launch_probe(lesson: str, kernel: str, N: int, C: int, args=(), launches: int = 2) -> dict:
    """A child job: the lesson's ``probe.launch(kernel, N, C, *args, launches=...)`` (named by
    :class:`Probe`: the lesson is passed in by name, never imported by this wing)."""
    module = importlib.import_module(Probe(lesson, kernel, *args).module)
    module.launch(kernel, N, C, *args, launches=launches)
    return {"line": f"child: {lesson} {kernel} N={N} C={C}: {launches} launches done"}


def main(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description="Nsight Compute on one rung: python -m "
                                                 "rmsnorm_lessons.inspection.nsight "
                                                 "VERSION N C (prints the table)")
    parser.add_argument("version")
    parser.add_argument("N", type=int)
    parser.add_argument("C", type=int)
    parser.add_argument("--launch", action="store_true", help="the child: call the rung twice")
    args = parser.parse_args(argv)
    if args.launch:
        launch(args.version, args.N, args.C)
        return 0
    try:
        print(table([profile(args.version, args.N, args.C)]))
    except ProfileError as exc:
        print(f"profile: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
