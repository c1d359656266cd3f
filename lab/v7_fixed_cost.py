"""Where v7_fast's time goes beyond streaming its bytes: a sweep of N at fixed C, fit time = fixed + N * per_row
(bench.fit_fixed_cost), for v7_fast's named variants and for the streaming kernel (bench.stream_ceiling) that
moves the same bytes with no reduction.

    python lab/v7_fixed_cost.py [--json F] [--repeats 40] [--variants "default;base"]

Accumulate mode. Each variant is checked against float64 on a small problem before it is timed.
results/NOTES.md also has "without the final sum" rows: those ran a timing-only mode (partials written,
dweight left unsummed) that the launcher does not offer; this script does not time it.
With --json the fits are written to F and the run is recorded in F's folder (MANIFEST.json).
"""
from __future__ import annotations

import argparse

import manifest
import v7lab
from v7lab import Variant

from rmsnorm_lessons.core import bf16, gpu
from rmsnorm_lessons.speed import bench

#: (C, the N of the sweep): N from a quarter of a round of row groups to a little more than the bench's
SWEEPS = ((768, (4224, 8448, 16896, 25344, 32768, 33792)), (4096, (1056, 2112, 4224, 8448, 16384, 16896)))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", help="write the fits here (and record the run in its folder's MANIFEST.json)")
    parser.add_argument("--repeats", type=int, default=40)
    v7lab.add_variant_argument(parser, "default;base")
    args = parser.parse_args(argv)
    names = v7lab.variant_names(parser, args)
    gpu.require()
    copy = gpu.copy_bandwidth()
    print(f"copy bandwidth {copy:.0f} GB/s")
    rows = []
    for C, ns in SWEEPS:
        small = v7lab.small_problem(C)
        variants = {}
        for name in names:
            v = Variant(v7lab.NAMED[name])
            report = v7lab.against_reference(v7lab.run_host(small, v), small, False, name)
            if report.ok:
                variants[name] = v
            else:
                print(f"FAIL {name} at C={C}: not timed\n{report}")
        lines = {}
        for N in ns:
            problem = bench.DeviceProblem(N, C, bf16.bfloat16)
            try:
                for name, v in variants.items():
                    t = v7lab.time_variant(v, N, C, problem, copy, args.repeats, name)
                    lines.setdefault(name, []).append((N, t.ms))
            finally:
                problem.free()
            t = bench.stream_ceiling(N, C, copy, False, args.repeats)
            lines.setdefault(bench.STREAM_NAME, []).append((N, t.ms))
        for tag, pts in lines.items():
            fixed, per_row = bench.fit_fixed_cost(*zip(*pts))
            print(f"C={C:<5} {tag:<24} fixed {fixed:5.1f} us, {per_row:6.2f} ns/row  "
                  + " ".join(f"{n}:{1e3 * m:.1f}" for n, m in pts))
            rows.append(dict(C=C, variant=tag, fixed_us=fixed, ns_per_row=per_row, points=pts))
    if args.json:
        manifest.save(args.json, dict(copy_gbps=copy, rows=rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
