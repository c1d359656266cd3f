"""v7_fast's launch variants against a streaming ceiling, at the benchmark's shapes, in both modes.

    python lab/v7_explore.py [--json F] [--repeats 50] [--variants "default;base;pf"]

Each variant (v7lab.NAMED: "default" the plan's choice, "base" no prefetch, "pf" prefetch with K = 2) is
a v7_fast.Config passed to the package's launcher. It is checked on a small problem against the float64
reference (both modes) before it is timed at the benchmark's shapes, in both modes.

The ceiling: bench.stream_ceiling (kernels/stream_ceiling.cu), an elementwise kernel that moves the same
bytes as v7 (accumulate: reads dout, inp, dinp and writes dinp; overwrite: reads two and writes one), with
no reduction at all. What it reaches, as a fraction of the copy bandwidth, is what any RMSNorm backward
with these bytes can hope for.

The variants of results/NOTES.md steps 11-12 (two or three blocks per SM, weight reread from L1) needed
kernel build switches that v7_fast.cu no longer has; their measurements stay in results/NOTES.md.
With --json the rows are written to F and the run is recorded in F's folder (MANIFEST.json).
"""
from __future__ import annotations

import argparse
import time

import manifest
import v7lab
from v7lab import Variant

from rmsnorm_lessons.core import bf16, gpu
from rmsnorm_lessons.speed import bench


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", help="write the rows here (and record the run in its folder's MANIFEST.json)")
    parser.add_argument("--repeats", type=int, default=50)
    v7lab.add_variant_argument(parser, ";".join(v7lab.NAMED))
    args = parser.parse_args(argv)
    names = v7lab.variant_names(parser, args)
    gpu.require()
    start = time.time()
    copy = gpu.copy_bandwidth()
    print(f"copy bandwidth {copy:.0f} GB/s")
    rows = []
    shapes = bench.LARGE_SHAPES + bench.SMALL_SHAPES
    print(f"{'variant':<22}{'N x C':>13}{'ms':>9}{'GB/s':>7}{'% copy':>8}")
    for N, C in shapes:
        for overwrite in (False, True):
            t = bench.stream_ceiling(N, C, copy, overwrite, args.repeats)
            d = t.as_dict()
            d.update(variant=t.name)
            rows.append(d)
            print(f"{t.name:<22}{f'{N}x{C}':>13}{t.ms:>9.4f}{t.gbps:>7.0f}{100 * t.fraction_of_copy:>7.1f}%")
        problem = bench.DeviceProblem(N, C, bf16.bfloat16)
        small = v7lab.small_problem(C)
        try:
            for name in names:
                for overwrite in (False, True):
                    v = Variant(v7lab.NAMED[name], overwrite=overwrite)
                    tag = name + (" (dinp=)" if overwrite else "")
                    t = v7lab.launchable_timing(v, N, C, small, problem, copy, args.repeats, tag)
                    if t is None:
                        continue
                    r = v7lab.resolved(N, C, v)
                    d = t.as_dict()
                    d.update(variant=tag, grid=r.grid, K=r.layout.K, block=r.layout.block)
                    rows.append(d)
                    print(f"{tag:<22}{f'{N}x{C}':>13}{t.ms:>9.4f}{t.gbps:>7.0f}{100 * t.fraction_of_copy:>7.1f}%"
                          f"  grid={r.grid} K={r.layout.K} block={r.layout.block}")
        finally:
            problem.free()
    print("fastest per shape and mode:")
    for N, C in shapes:
        for ow in (False, True):
            mine = [r for r in rows if (r["N"], r["C"]) == (N, C) and ("(dinp=)" in r["variant"]) == ow
                    and not r["variant"].startswith(bench.STREAM_NAME)]
            ceil = [r for r in rows if (r["N"], r["C"]) == (N, C) and ("(dinp=)" in r["variant"]) == ow
                    and r["variant"].startswith(bench.STREAM_NAME)]
            if mine:
                best = min(mine, key=lambda r: r["ms"])
                base = next((r for r in mine if r["variant"].split(" ")[0] == "default"), best)
                print(f"{f'{N}x{C}':>13}{' dinp=' if ow else ' +=   '} best {best['variant']:<20} "
                      f"{100 * best['fraction_of_copy']:.1f}% (default {100 * base['fraction_of_copy']:.1f}%, "
                      f"stream {100 * ceil[0]['fraction_of_copy']:.1f}%)")
    if args.json:
        manifest.save(args.json, dict(copy_gbps=copy, rows=rows))
    print(f"done in {time.time() - start:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
