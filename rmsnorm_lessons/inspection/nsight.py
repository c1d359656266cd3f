"""Nsight Compute (``ncu``) on one launch of a rung: DRAM throughput, achieved occupancy, warp stall
reasons.

:func:`profile` starts ``ncu --clock-control none --csv --page raw --metrics ... --kernel-name K
--launch-skip 1 --launch-count 1 python -m rmsnorm_lessons.inspection.nsight --launch VERSION N C``:
the child calls the rung twice (the first call compiles and warms up; ncu profiles the second) and
ncu prints one CSV row per profiled kernel. :func:`~rmsnorm_lessons.inspection.nsight_csv.parse_csv`
reads that CSV (the raw page: a header of metric names, a row of units, a row per kernel; the
details page's long form too) and :func:`profile` returns a :class:`Profile`: the few numbers the
lessons need. The child is started by :mod:`rmsnorm_lessons.core.child`, which also runs the rung
there.

``--clock-control none`` keeps the GPU's own clocks (ncu otherwise locks them to base clocks, and on
some virtual machines it may not). ncu needs a GPU and permission to read its performance counters;
without either the error says which.

:func:`reading` is the course's one rule for memory- against latency-bound (:func:`rule` states
it); the lessons call it through :func:`rmsnorm_lessons.course.profiles.bottleneck`, which also
shows the saved output of the same call where there is no GPU.
"""
from __future__ import annotations

import numbers
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ..core import build, child
from .nsight_csv import ProfileError, parse_csv  # noqa: F401 (nsight.X callers)

DRAM = "dram__throughput.avg.pct_of_peak_sustained_elapsed"  # DRAM throughput, % of its peak
# achieved occupancy, % of the SM's warps
OCCUPANCY = "sm__warps_active.avg.pct_of_peak_sustained_active"
DURATION = "gpu__time_duration.sum"  # the kernel's time
#: warp stall reasons: warps stalled for this reason per issued instruction (Warp State Statistics);
#: they add up to the cycles between two instructions a warp issues
STALLS = "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\\.ratio"
_STALL = re.compile(r"^smsp__average_warps_issue_stalled_(?P<reason>.+)_per_issue_active\.ratio$")
METRICS = (DRAM, OCCUPANCY, DURATION, STALLS)
NOT_FOUND = ("ncu (Nsight Compute) was not found on PATH, under CUDA_HOME or in "
             "/usr/local/cuda/bin")


def find() -> str | None:
    """The ncu executable: where :func:`rmsnorm_lessons.core.build.find_tool` looks, then the newest
    of
    NVIDIA's standalone installs (``/opt/nvidia/nsight-compute/<version>/ncu``), or None."""
    found = build.find_tool("ncu")
    if found:
        return found
    installs = sorted(Path("/opt/nvidia/nsight-compute").glob("*/ncu"),
                      key=lambda p: [int(x) if x.isdigit() else 0
                                     for x in p.parent.name.split(".")])
    return str(installs[-1]) if installs else None


@dataclass
class Profile:
    """What ncu measured on one launch of one kernel of a rung."""

    version: str
    kernel: str
    shape: tuple
    dram_pct: float | None  # DRAM throughput, % of peak
    occupancy_pct: float | None  # achieved occupancy, % of the SM's warp slots
    duration_us: float | None
    stalls: dict = field(default_factory=dict)  # reason -> warps stalled per issued instruction

    def top_stalls(self, k: int = 3) -> list[tuple[str, float, float]]:
        """``(reason, stalled warps per issued instruction, % of all stalls)``, largest first
        ("selected" is issuing, not a stall, and left out)."""
        items = [(r, v) for r, v in self.stalls.items() if v is not None and r != "selected"]
        total = sum(v for _, v in items) or 1.0
        items.sort(key=lambda t: -t[1])
        return [(r, v, 100.0 * v / total) for r, v in items[:k]]


def _duration_us(value, unit):
    if value is None:
        return None
    scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3,
             "s": 1e6,
             "second": 1e6}
    return value * scale.get((unit or "ns").strip(), 1e-3)


def to_profile(entry: dict, version: str, shape) -> Profile:
    m, u = entry["metrics"], entry["units"]
    stalls = {}
    for name, value in m.items():
        hit = _STALL.match(name)
        if hit:
            stalls[hit.group("reason")] = value
    return Profile(version, entry["kernel"], tuple(shape), m.get(DRAM), m.get(OCCUPANCY),
                   _duration_us(m.get(DURATION), u.get(DURATION)), stalls)


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


def command(ncu: str, version: str, N: int, C: int, kernel: str | None = None) -> list[str]:
    """The ncu command line: profile the second launch of ``kernel`` (by default the main kernel the
    plan launches at this shape: v7_fast's depends on C)."""
    from ..core import ladder

    rung = ladder.get(version)
    if kernel is None:
        kernel = ladder.plan(rung, N, C)[0].kernel
    if kernel not in rung.kernels:
        raise ValueError(f"{version} has no kernel {kernel!r}; its kernels: "
                         f"{', '.join(rung.kernels)}")
    wrapper = [ncu, "--clock-control", "none", "--csv", "--page", "raw", "--metrics",
               ",".join(METRICS),
               "--kernel-name", kernel, "--launch-skip", "1", "--launch-count", "1"]
    return child.command(["-m", "rmsnorm_lessons.inspection.nsight", "--launch", rung.name, N, C],
                         wrapper)


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


def profile(version: str, N: int, C: int, kernel: str | None = None,
            timeout: float = 300) -> Profile:
    """ncu on the second launch of ``version``'s ``kernel`` at (N, C): a :class:`Profile`."""
    ncu = find()
    if ncu is None:
        raise ProfileError(f"{NOT_FOUND}; it comes with the CUDA toolkit, and profiling needs "
                           "a GPU")
    done = child.run(command(ncu, version, N, C, kernel), timeout=timeout)
    if done.timed_out:
        raise ProfileError(f"ncu did not finish within {timeout} s on {version} at {N}x{C}")
    found = parse_csv(done.stdout)
    if done.returncode != 0 or not found:
        raise ProfileError(explain_failure(done.stdout + "\n" + done.stderr, done.returncode))
    return to_profile(found[-1], version, (N, C))


def checked(version, N, C, kernel=None):
    """The rung of ``version`` once N, C and ``kernel`` pass the package's rules (before any
    launch): TypeError or ValueError naming the argument and the rule."""
    from ..core import ladder, validate

    rung = ladder.get(version)
    for name, value, what in (("N", N, "rows"), ("C", C, "columns")):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise TypeError(f"{name} ({what}) must be an int, got {type(value).__name__} "
                            f"{value!r}")
        if value < 1:
            raise ValueError(f"{name} ({what}) must be at least 1 (ncu profiles one launch), got "
                             f"{value}")
    validate.size(rung, int(N), int(C))
    validate.shared_memory(rung, int(C), rung.block_size)
    if kernel is not None and kernel not in rung.kernels:
        raise ValueError(f"kernel must be one of {version}'s kernels ({', '.join(rung.kernels)}) "
                         f"or None, got {kernel!r}")
    return rung


# --------------------------------------------------------------------------------------------------
# the child: calls one rung twice (the first call compiles and warms up; ncu profiles the second)


def launch(version: str, N: int, C: int, launches: int = 2) -> None:
    child.run_rung(version, N, C, calls=launches)


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
