"""v7_fast on the GPU: ``check`` (a correctness sweep) and ``variants`` (launch variants timed).

    python lab/v7_gpu.py check                   # against float64, both modes, variants, determinism
    python lab/v7_gpu.py variants --json F       # times launch variants at the benchmark's shapes

A variant is a v7_fast.Config (K, prefetch, per_sm) plus an optional block size (v7lab.Variant);
each is checked on a small problem with the same C before it is timed at the full shape. Prints short
tables; ``variants --json F`` also records the run in F's folder (MANIFEST.json, lab/manifest.py).
"""
from __future__ import annotations

import argparse
import time

import manifest
import v7lab
from v7lab import V7, Config, Variant

from rmsnorm_lessons.core import bf16, gpu, ladder, reference
from rmsnorm_lessons.core.ladder import v7_fast
from rmsnorm_lessons.speed import bench

SWEEP = [(1, 8), (3, 16), (37, 24), (1031, 8), (129, 264), (4097, 512), (1031, 768), (7, 776), (2049, 1024),
         (513, 1032), (129, 1600), (1000, 2048), (65537, 264), (20001, 768), (4095, 4096), (513, 5120),
         (255, 6152), (1023, 8192), (333, 12288), (257, 16376), (513, 16384), (1, 16384)]
VARIANT_CHECKS = [Variant(Config(K=1)), Variant(Config(K=2)), Variant(Config(K=3)),
                  Variant(block=256), Variant(Config(per_sm=1), block=256), Variant(Config(K=4), block=128),
                  Variant(Config(prefetch=False)), Variant(Config(prefetch=True))]


def cmd_check(args) -> int:
    gpu.require()
    failed = 0
    start = time.time()
    print("v7_fast against the float64 reference (rel L2 / max |err|); inputs and outputs start random")
    for i, (N, C) in enumerate(SWEEP):
        for overwrite in (False, True):
            if overwrite and i % 2:  # overwrite mode on every other shape
                continue
            v = Variant(overwrite=overwrite)
            p = reference.random_problem(N, C, bf16.bfloat16, seed=1000 + i, accumulate=True)
            report = v7lab.against_reference(v7lab.run_host(p, v), p, overwrite, V7 + (" (dinp=)" if overwrite else ""))
            print(v7lab.line(report.version, report, v7lab.describe(N, C, v)))
            failed += not report.ok
            if not report.ok:
                print(report)
    print("launch variants")
    for C in (264, 1024, 4096, 8192):
        N = 2053
        p = reference.random_problem(N, C, bf16.bfloat16, seed=C, accumulate=True)
        for v in VARIANT_CHECKS:
            try:
                extra = v7lab.describe(N, C, v)
            except ValueError as exc:
                print(f"skip {v.tag} at C={C}: {exc}")
                continue
            report = v7lab.against_reference(v7lab.run_host(p, v), p, False, v.tag)
            print(v7lab.line(v.tag, report, extra))
            failed += not report.ok
    print("determinism: 20 runs each, bitwise")
    for N, C in ((4099, 1600), (2053, 16384), (65537, 768), (1, 8)):
        p = reference.random_problem(N, C, bf16.bfloat16, seed=N, accumulate=True)
        first = v7lab.run_host(p, Variant())
        same = all(v7lab.same_bits(v7lab.run_host(p, Variant()), first) for _ in range(19))
        print(f"{'ok  ' if same else 'FAIL'} N={N:<6} C={C:<6} 20 runs identical: {same}")
        failed += not same
    print(f"{failed} failed ({time.time() - start:.0f} s)")
    return 1 if failed else 0


def variants_for(C: int) -> list[Variant]:
    """Launch variants worth timing at C (the default first)."""
    out = [Variant()]
    default = v7_fast.row_layout(C)
    out.append(Variant(Config(prefetch=not default.prefetch)))
    default_K = v7_fast.row_layout(C, prefetch=False).K  # the K of Config(prefetch=False)
    for K in (2, 3, 4):
        if K != default_K and 32 * ladder.ceil_div(C // 8, 32 * K) <= v7_fast.DEFINES["V7_MAX_BLOCK"]:
            out.append(Variant(Config(K=K, prefetch=False)))
    if default.group <= 256:
        out.append(Variant(block=256))  # two blocks of 256 per SM: more, smaller blocks
    if default.group <= 128:
        out.append(Variant(block=128))
    return out


def cmd_variants(args) -> int:
    gpu.require()
    copy = gpu.copy_bandwidth()
    shapes = bench.LARGE_SHAPES + bench.SMALL_SHAPES
    rows = []
    print(f"copy bandwidth {copy:.0f} GB/s; v7_fast launch variants (accumulate mode unless marked)")
    print(f"{'variant':<26}{'N x C':>13}{'ms':>9}{'GB/s':>7}{'% copy':>8}  launch")
    for N, C in shapes:
        problem = bench.DeviceProblem(N, C, bf16.bfloat16)
        small = v7lab.small_problem(C)
        try:
            for v in variants_for(C) + [Variant(overwrite=True)]:
                t = v7lab.launchable_timing(v, N, C, small, problem, copy, args.repeats, f"v7[{v.tag}]")
                if t is None:
                    continue
                launch = v7lab.describe(N, C, v)
                d = t.as_dict()
                d.update(variant=v.tag, launch=launch, spread=t.ms_spread)
                rows.append(d)
                print(f"{v.tag:<26}{f'{N}x{C}':>13}{t.ms:>9.4f}{t.gbps:>7.0f}{100 * t.fraction_of_copy:>7.1f}%  "
                      f"{launch}")
        finally:
            problem.free()
    print("fastest accumulate-mode variant per shape:")
    for N, C in shapes:
        mine = [r for r in rows if (r["N"], r["C"]) == (N, C) and "(dinp=)" not in r["variant"]]
        if mine:
            best = min(mine, key=lambda r: r["ms"])
            default = next((r for r in mine if r["variant"] == "default"), best)
            print(f"{f'{N}x{C}':>13}  {best['variant']:<22} {best['ms']:.4f} ms ({100 * best['fraction_of_copy']:.1f}% "
                  f"of copy; default {default['ms']:.4f} ms)")
    if args.json:
        manifest.save(args.json, dict(copy_gbps=copy, rows=rows))
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("check", help="v7_fast against float64: a shape sweep, both modes, variants, determinism")
    p.set_defaults(func=cmd_check)
    p = sub.add_parser("variants", help="time launch variants at the benchmark's shapes")
    p.add_argument("--json", help="write the rows here (and record the run in its folder's MANIFEST.json)")
    p.add_argument("--repeats", type=int, default=50)
    p.set_defaults(func=cmd_variants)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
