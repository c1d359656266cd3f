#!/usr/bin/env python3
"""compute-sanitizer's four tools over every version of the ladder, at a small and an odd shape
(GPU).

    python tools/sanitize.py                                   # memcheck racecheck synccheck
    initcheck, all versions python tools/sanitize.py --tools memcheck --versions v6_last_block
    --logs out/sanitize python tools/sanitize.py --jobs 4                          # four sanitizer
    runs at a time python tools/sanitize.py --list                            # print the runs,
    start nothing

Every (tool, version) pair runs in its own process: ``compute-sanitizer --tool TOOL python
tools/sanitize.py --launch VERSION``. That child (the driver) builds fully initialised inputs on the
host (initcheck flags any read of device memory nothing wrote), runs the version twice at each shape
through ``rl.run`` and checks the result against the float64 reference. The parent reads the
sanitizer's ``ERROR SUMMARY`` (and racecheck's hazard summary), prints one line per run and a table
of error totals, and exits 1 on any error or failed run, 2 when there is no compute-sanitizer or no
GPU.
"""
from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import rmsnorm_lessons as rl  # noqa: E402 (after the path)
from rmsnorm_lessons.core import child, compare, gpu, ladder, reference  # noqa: E402
from rmsnorm_lessons.inspection import sanitizer  # noqa: E402

TOOLS = sanitizer.TOOLS
NO_GPU_EXIT = 3  # the driver's exit code when no GPU is usable
SANITIZER_EXIT = sanitizer.ERROR_EXIT  # compute-sanitizer's exit code when it found errors


def shapes_for(spec) -> list[tuple[int, int]]:
    """A small shape and an odd one (N odd, C not a multiple of 256; odd C where the version allows
    it)."""
    odd_C = 777 if spec.c_multiple == 1 else 776
    return [(8, 256), (37, odd_C)]


# --------------------------------------------------------------------------------------------------
# the driver: runs inside compute-sanitizer


def drive(version: str) -> int:
    try:
        gpu.require()
    except gpu.GpuUnavailable as exc:
        print(f"driver: {exc}", flush=True)
        return NO_GPU_EXIT
    names = [r.name for r in ladder.SHIPPED] if version == "all" else [version]
    failed = 0
    for name in names:
        spec = ladder.get(name)
        for N, C in shapes_for(spec):
            # every input set on the host
            p = reference.random_problem(N, C, spec.dtype, seed=N * 1000 + C)
            args = (p["dout"], p["inp"], p["weight"], p["rstd"])
            once = rl.run(spec, *args, p["dinp"], p["dweight"])
            twice = rl.run(spec, *args, *once)  # the same launcher again: scratch reused
            ref1 = reference.backward(*args, p["dinp"], p["dweight"])
            ref2 = reference.backward(*args, *ref1)
            ok = True
            # two calls' worth of rows in the second
            for got, want in ((once, ref1), (twice, ref2)):
                ok &= compare.compare_outputs(spec, 2 * N, got, want, name=name, C=C).ok
            print(f"driver: {name} N={N} C={C}: {'ok' if ok else 'WRONG RESULT'}", flush=True)
            failed += not ok
    return 1 if failed else 0


# --------------------------------------------------------------------------------------------------
# the parent: one sanitizer run per tool and version

parse_summary = sanitizer.parse_summary  # the one reader of the report


def driver(version: str) -> list[str]:
    """This script's driver for ``version`` (or "all") as a child command line."""
    return child.command([Path(__file__).resolve(), "--launch", version])


def command(exe: str, tool: str, version: str) -> list[str]:
    return child.command([Path(__file__).resolve(), "--launch", version], sanitizer.wrapper(exe,
            tool))


def _versions(arg):
    names = arg or [r.name for r in ladder.SHIPPED]
    for n in names:
        ladder.get(n)  # unknown names fail here, with the list
    return names


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tools", nargs="+", choices=TOOLS, default=list(TOOLS))
    parser.add_argument("--versions", nargs="+")
    parser.add_argument("--logs", help="write every run's full output to this folder")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per run (default 300)")
    parser.add_argument("--jobs", type=int, default=1, help="sanitizer runs at once (they share "
                                                            "the GPU)")
    parser.add_argument("--list", action="store_true", help="print the runs and exit")
    parser.add_argument("--launch", help=argparse.SUPPRESS)  # the driver, inside compute-sanitizer
    args = parser.parse_args(argv)

    if args.launch:
        return drive(args.launch)

    try:
        versions = _versions(args.versions)
    except ValueError as exc:
        print(f"sanitize: {exc}", file=sys.stderr)
        return 2
    exe = sanitizer.find()
    if args.list:
        for tool in args.tools:
            for v in versions:
                print(" ".join(command(exe or "compute-sanitizer", tool, v)))
        return 0
    if exe is None:
        print("sanitize: compute-sanitizer was not found on PATH, under CUDA_HOME or in "
              "/usr/local/cuda/bin; "
              "it comes with the CUDA toolkit.", file=sys.stderr)
        return 2

    # a plain run first: it checks the GPU, compiles every version once (PyCUDA caches the cubins,
    # so the sanitized runs do not compile) and shows that the driver itself passes
    plain = child.run(driver("all"), timeout=args.timeout * len(versions))
    print(plain.stdout, end="")
    if plain.timed_out:
        print(f"sanitize: the driver did not finish without the sanitizer in "
              f"{args.timeout * len(versions):.0f} s", file=sys.stderr)
        return 1
    if plain.returncode == NO_GPU_EXIT:
        print("sanitize: no usable GPU here, nothing to sanitize.", file=sys.stderr)
        return 2
    if plain.returncode != 0:
        print(plain.stderr[-4000:], file=sys.stderr)
        print(f"sanitize: the driver fails without the sanitizer (exit {plain.returncode}); fix "
              "that first.",
              file=sys.stderr)
        return 1

    logs = Path(args.logs) if args.logs else None
    if logs:
        logs.mkdir(parents=True, exist_ok=True)
    print(f"sanitizer: {exe}")
    totals: dict[tuple[str, str], str] = {}
    bad = 0

    def one(tool, v):
        start = time.time()
        report = sanitizer.run_command(command(exe, tool, v), tool, v, timeout=args.timeout)
        return tool, v, report.output, report.returncode, time.time() - start

    runs = [(tool, v) for tool in args.tools for v in versions]
    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        for tool, v, out, rc, seconds in pool.map(lambda r: one(*r), runs):
            if logs:
                (logs / f"{tool}-{v}.log").write_text(out)
            summary = parse_summary(out)
            if rc is None:
                status, cell = f"TIMED OUT after {args.timeout:.0f} s", "timeout"
            elif summary is None:
                found = " (it found errors)" if rc == SANITIZER_EXIT else ""
                status, cell = f"no sanitizer summary (exit {rc}){found}", "failed"
            else:
                errors, warnings = summary
                cell = str(errors)
                status = f"{errors} error(s)" + (f", {warnings} warning(s)" if warnings else "")
                if errors == 0 and rc == SANITIZER_EXIT:
                    status += f", but it exited {rc}: errors found"
                    cell = "failed"
                elif errors == 0 and rc != 0:
                    status += f", but the driver failed (exit {rc})"
                    cell = "failed"
            ok = cell == "0"
            bad += not ok
            totals[tool, v] = cell
            print(f"{'ok  ' if ok else 'FAIL'} {tool:<10} {v:<16} {status}  ({seconds:.0f} s)",
                  flush=True)
            if not ok:
                lines = [l for l in out.splitlines()
                         if l.startswith("=========") or "driver:" in l or "Error" in l]
                print("\n".join("     " + l for l in (lines or out.splitlines())[:60]), flush=True)

    width = max(len(v) for v in versions)
    print("\nerrors per tool and version")
    print(" " * width + "".join(f"{t:>11}" for t in args.tools))
    for v in versions:
        print(f"{v:<{width}}" + "".join(f"{totals[t, v]:>11}" for t in args.tools))
    print(f"{bad} of {len(totals)} runs reported errors or failed" if bad else f"all {len(totals)} "
                                                                               "runs clean")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
