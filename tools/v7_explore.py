"""Issue 5 experiments: v7_fast compiled with other launch bounds / prefetching, against a streaming ceiling.

    python3 tools/v7_explore.py [--json F] [--repeats 50] [--shapes large|all]

Each variant is kernels/v7_fast.cu compiled with a set of -D flags (V7_BLOCKS_PER_SM, V7_K_LIMIT,
V7_WEIGHT_L1), a tuning (K, prefetch) and a number of blocks per SM. It is checked on a small problem against
the float64 reference (both modes) before it is timed at the benchmark's shapes, in both modes.

The ceiling: bench.stream_ceiling (kernels/stream_ceiling.cu), an elementwise kernel that moves the same
bytes as v7 (accumulate: reads dout, inp, dinp and writes dinp; overwrite: reads two and writes one), with
no reduction at all. What it reaches, as a fraction of the copy bandwidth, is what any RMSNorm backward
with these bytes can hope for.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import rmsnorm_lessons as rl  # noqa: E402
from rmsnorm_lessons import bench, bf16, build, kernels, reference  # noqa: E402
from v7_gpu import checked_timing, tuned_launcher  # noqa: E402

# name: (-D flags, kernels.V7_TUNING, blocks per SM)
VARIANTS = {
    "default": ({}, {}, 1),  # the plan's choice
    "base": ({}, {"prefetch": 0}, 1),  # no prefetch: K from C (4 above C = 1024)
    "pf": ({}, {"prefetch": 1}, 1),  # prefetch, K = 2
    "base,wL1": ({"V7_WEIGHT_L1": 1}, {"prefetch": 0}, 1),  # weight reread from L1 in each pass
    "x2,K=2": ({"V7_BLOCKS_PER_SM": 2, "V7_K_LIMIT": 2, "V7_WEIGHT_L1": 1}, {"K": 2, "prefetch": 0}, 2),
    "x2,K=1": ({"V7_BLOCKS_PER_SM": 2, "V7_K_LIMIT": 2, "V7_WEIGHT_L1": 1}, {"K": 1, "prefetch": 0}, 2),
    "x3,K=1": ({"V7_BLOCKS_PER_SM": 3, "V7_K_LIMIT": 1, "V7_WEIGHT_L1": 1}, {"K": 1, "prefetch": 0}, 3),
}

def variant_launcher(name, N, C, overwrite):
    defines, tuning, per_sm = VARIANTS[name]
    L = tuned_launcher(N, C, overwrite=overwrite, **tuning)
    module = build.source_module("v7_fast", defines=defines)
    fn = module.get_function("rmsnorm_backward_v7")
    drv = rl.gpu.driver()
    static = fn.get_attribute(drv.function_attribute.SHARED_SIZE_BYTES)
    fn.set_attribute(drv.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES,
                     rl.gpu.facts().shared_memory_per_block_optin - static)
    L.functions["rmsnorm_backward_v7"] = fn
    cfg = L._v7
    grid = max(1, min(L.multiprocessors * per_sm, -(-N // cfg.shape.groups)))
    passes = -(-C // kernels.V7_COLUMNS_PER_PASS)
    reducers = min(passes, max(1, grid // 2))
    L._v7 = dataclasses.replace(cfg, per_sm=per_sm, grid=grid, reducers=reducers)
    return L, fn


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json")
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--variants", default=";".join(VARIANTS), help="names separated by ;")
    args = parser.parse_args(argv)
    names = args.variants.split(";")
    rl.gpu.require()
    start = time.time()
    for name in names:  # compile every module first, and print its resources
        defines = VARIANTS[name][0]
        build.source_module("v7_fast", defines=defines)
    print(f"compiled {len(names)} variants in {time.time() - start:.0f} s")
    copy = rl.gpu.copy_bandwidth()
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
        small = reference.random_problem(1031, C, bf16.bfloat16, seed=C + 7, accumulate=True)
        try:
            for name in names:
                for overwrite in (False, True):
                    tag = name + (" (dinp=)" if overwrite else "")
                    try:
                        L, _ = variant_launcher(name, N, C, overwrite)
                        check_L, _ = variant_launcher(name, 1031, C, overwrite)
                    except ValueError as exc:
                        print(f"skip {tag} at {N}x{C}: {str(exc)[:80]}")
                        break
                    t = checked_timing(L, check_L, small, problem, copy, args.repeats, overwrite, tag)
                    if t is None:
                        continue
                    d = t.as_dict()
                    d.update(variant=tag, grid=L._v7.grid, K=L._v7.shape.K, block=L._v7.shape.block)
                    rows.append(d)
                    print(f"{tag:<22}{f'{N}x{C}':>13}{t.ms:>9.4f}{t.gbps:>7.0f}{100 * t.fraction_of_copy:>7.1f}%"
                          f"  grid={L._v7.grid} K={L._v7.shape.K} block={L._v7.shape.block}")
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
        Path(args.json).write_text(json.dumps(dict(copy_gbps=copy, rows=rows), indent=1))
    print(f"done in {time.time() - start:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
