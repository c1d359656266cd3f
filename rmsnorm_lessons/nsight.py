"""Nsight Compute (``ncu``) on one launch of a rung: DRAM throughput, achieved occupancy, warp stall
reasons.

:func:`profile` starts ``ncu --clock-control none --csv --page raw --metrics ... --kernel-name K
--launch-skip 1 --launch-count 1 python -m rmsnorm_lessons.nsight --launch VERSION N C``: the child
calls the rung twice (the first call compiles and warms up; ncu profiles the second) and ncu prints
one CSV row per profiled kernel. :func:`parse_csv` reads that CSV (the raw page: a header of metric
names, a row of units, a row per kernel; the details page's long form too) and :func:`profile`
returns a :class:`Profile`: the few numbers lesson 13 needs. The child is started by
:mod:`rmsnorm_lessons.child`, which also runs the rung there.

``--clock-control none`` keeps the GPU's own clocks (ncu otherwise locks them to base clocks, and on
some virtual machines it may not). ncu needs a GPU and permission to read its performance counters;
without either the error says which.
"""
from __future__ import annotations

import csv
import io
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from . import build, child

DRAM = "dram__throughput.avg.pct_of_peak_sustained_elapsed"  # DRAM throughput, % of its peak
# achieved occupancy, % of the SM's warps
OCCUPANCY = "sm__warps_active.avg.pct_of_peak_sustained_active"
DURATION = "gpu__time_duration.sum"  # the kernel's time
#: warp stall reasons: warps stalled for this reason per issued instruction (Warp State Statistics);
#: they add up to the cycles between two instructions a warp issues
STALLS = "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\\.ratio"
_STALL = re.compile(r"^smsp__average_warps_issue_stalled_(?P<reason>.+)_per_issue_active\.ratio$")
METRICS = (DRAM, OCCUPANCY, DURATION, STALLS)


class ProfileError(RuntimeError):
    pass


def find() -> str | None:
    """The ncu executable: where :func:`rmsnorm_lessons.build.find_tool` looks, then the newest of
    NVIDIA's standalone installs (``/opt/nvidia/nsight-compute/<version>/ncu``), or None."""
    found = build.find_tool("ncu")
    if found:
        return found
    installs = sorted(Path("/opt/nvidia/nsight-compute").glob("*/ncu"),
                      key=lambda p: [int(x) if x.isdigit() else 0
                                     for x in p.parent.name.split(".")])
    return str(installs[-1]) if installs else None


# --------------------------------------------------------------------------------------------------
# reading ncu's CSV


def _number(text: str):
    t = (text or "").strip().replace(",", "")
    try:
        return float(t)
    except ValueError:
        return None


def _csv_lines(output: str) -> str:
    """The CSV part of ncu's stdout: lines starting with a double quote (``==PROF==`` lines and the
    program's own output dropped)."""
    return "\n".join(ln for ln in output.splitlines() if ln.startswith('"'))


def parse_csv(output: str) -> list[dict]:
    """One dict per profiled kernel: ``kernel`` (its name), ``metrics`` {metric name: float},
    ``units`` {metric name: unit}. Reads the raw page (``--page raw``: header of metric names, a row
    of units, a row per kernel) and the details page (``--page details``: one row per metric, with
    "Metric Name", "Metric Unit" and "Metric Value" columns)."""
    rows = list(csv.reader(io.StringIO(_csv_lines(output))))
    if not rows:
        return []
    header = rows[0]
    if "Metric Name" in header and "Metric Value" in header:  # the details page, long form
        col = {name: header.index(name) for name in ("Metric Name", "Metric Unit", "Metric Value")}
        ident = header.index("ID") if "ID" in header else None
        kernels: dict = {}
        for r in rows[1:]:
            if len(r) != len(header):
                continue
            key = r[ident] if ident is not None else r[header.index("Kernel Name")]
            k = kernels.setdefault(key, {"kernel": r[header.index("Kernel Name")], "metrics": {},
                                         "units": {}})
            k["metrics"][r[col["Metric Name"]]] = _number(r[col["Metric Value"]])
            k["units"][r[col["Metric Name"]]] = r[col["Metric Unit"]]
        return list(kernels.values())
    if "Kernel Name" not in header:
        raise ProfileError(f"ncu's CSV has no \"Kernel Name\" column: {header[:6]}")
    name_at = header.index("Kernel Name")
    units = {}
    out = []
    for r in rows[1:]:
        if len(r) != len(header):
            continue
        if not r[name_at]:  # the units row: no kernel name
            units = {h: u for h, u in zip(header, r) if "__" in h}
            continue
        metrics = {h: _number(v) for h, v in zip(header, r) if "__" in h}  # metric names hold "__"
        out.append({"kernel": r[name_at], "metrics": metrics, "units": units})
    return out


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
# running ncu on a child process


def command(ncu: str, version: str, N: int, C: int, kernel: str | None = None) -> list[str]:
    """The ncu command line: profile the second launch of ``kernel`` (by default the main kernel the
    plan launches at this shape: v7_fast's depends on C)."""
    from . import ladder

    rung = ladder.get(version)
    if kernel is None:
        kernel = ladder.plan(rung, N, C)[0].kernel
    if kernel not in rung.kernels:
        raise ValueError(f"{version} has no kernel {kernel!r}; its kernels: "
                         f"{', '.join(rung.kernels)}")
    wrapper = [ncu, "--clock-control", "none", "--csv", "--page", "raw", "--metrics",
               ",".join(METRICS),
               "--kernel-name", kernel, "--launch-skip", "1", "--launch-count", "1"]
    return child.command(["-m", "rmsnorm_lessons.nsight", "--launch", rung.name, N, C], wrapper)


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
        raise ProfileError("ncu (Nsight Compute) was not found on PATH, under CUDA_HOME or in "
                           "/usr/local/cuda/bin; "
                           "it comes with the CUDA toolkit, and profiling needs a GPU")
    done = child.run(command(ncu, version, N, C, kernel), timeout=timeout)
    if done.timed_out:
        raise ProfileError(f"ncu did not finish within {timeout} s on {version} at {N}x{C}")
    found = parse_csv(done.stdout)
    if done.returncode != 0 or not found:
        raise ProfileError(explain_failure(done.stdout + "\n" + done.stderr, done.returncode))
    return to_profile(found[-1], version, (N, C))


# --------------------------------------------------------------------------------------------------
# the child: calls one rung twice (the first call compiles and warms up; ncu profiles the second)


def launch(version: str, N: int, C: int, launches: int = 2) -> None:
    child.run_rung(version, N, C, calls=launches)


def main(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description="Nsight Compute on one rung: python -m "
                                                 "rmsnorm_lessons.nsight "
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
