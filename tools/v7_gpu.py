"""v7_fast on the GPU, for tools/gpu-v7.sh: ``check`` (a correctness sweep) and ``variants`` (tuning).

    python3 tools/v7_gpu.py check                 # against float64, both modes, variants, determinism
    python3 tools/v7_gpu.py variants --json F     # times launch variants at the benchmark's shapes

A variant is a dict of kernels.V7_TUNING keys (K, per_sm, reduce) plus an optional block size; each is
checked on a small problem with the same C before it is timed at the full shape. Prints short tables.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import rmsnorm_lessons as rl  # noqa: E402
from rmsnorm_lessons import bench, bf16, check, kernels, reference  # noqa: E402

V7 = kernels.get("v7_fast")


def tuned_launcher(N, C, overwrite=False, block=None, **tuning):
    """A fresh Launcher of v7_fast made and resolved under ``tuning`` (kernels.V7_TUNING)."""
    saved = dict(kernels.V7_TUNING)
    kernels.V7_TUNING.clear()
    kernels.V7_TUNING.update(tuning)
    try:
        L = kernels.Launcher(V7, N, C, block_size=block, overwrite=overwrite)
        kernels._v7_config(L)  # resolved now, while the tuning is set; the launcher keeps it
    finally:
        kernels.V7_TUNING.clear()
        kernels.V7_TUNING.update(saved)
    return L


def describe(L) -> str:
    c = L._v7
    s = c.shape
    return (f"K={s.K}{' prefetch' if s.prefetch else ''} G={s.group} groups={s.groups} block={s.block} "
            f"per_sm={c.per_sm} grid={c.grid} "
            f"{c.reduce}:{c.reducers} smem={s.smem}")


def run_launcher(L, p, overwrite=False):
    """Run launcher L on host problem p (GPUArrays made here); return (dinp, dweight) as NumPy."""
    from pycuda import gpuarray

    dev = {k: gpuarray.to_gpu(np.ascontiguousarray(p[k])) for k in ("dout", "inp", "weight", "rstd", "dinp",
                                                                     "dweight")}
    L(kernels.Buffers(**{k: v.gpudata for k, v in dev.items()}))
    rl.gpu.synchronize()
    out = dev["dinp"].get(), dev["dweight"].get()
    for v in dev.values():
        v.gpudata.free()
    return out


def compare(N, got, p, overwrite):
    ref = reference.backward(p["dout"], p["inp"], p["weight"], p["rstd"], None if overwrite else p["dinp"],
                             p["dweight"])
    tol = check.tolerances(bf16.bfloat16, N)
    return (check.compare(got[0], ref[0], *tol["dinp"], name="dinp"),
            check.compare(got[1], ref[1], *tol["dweight"], name="dweight"))


def checked_timing(L, check_L, small, problem, copy, repeats, overwrite, name):
    """Run check_L on the small host problem against float64; if right, time L on the device problem
    (a bench.Timing), else print why and return None: a variant is never timed unchecked."""
    a, b = compare(len(small["rstd"]), run_launcher(check_L, small, overwrite), small, overwrite)
    if not (a.ok and b.ok):
        print(f"FAIL {name} at C={L.C}: not timed\n  {a}\n  {b}")
        return None
    return bench.bench_version(V7, L.N, L.C, copy, repeats=repeats, problem=problem, overwrite=overwrite,
                               launcher=L, name=name)


def line(tag, N, C, a, b, extra=""):
    ok = a.ok and b.ok
    return (f"{'ok  ' if ok else 'FAIL'} {tag:<22} N={N:<6} C={C:<6} dinp {a.rel_l2_error:.1e}/{a.max_abs_error:.1e} "
            f"dweight {b.rel_l2_error:.1e}/{b.max_abs_error:.1e} {extra}"), ok


# ----------------------------------------------------------------------------------------------------


SWEEP = [(1, 8), (3, 16), (37, 24), (1031, 8), (129, 264), (4097, 512), (1031, 768), (7, 776), (2049, 1024),
         (513, 1032), (129, 1600), (1000, 2048), (65537, 264), (20001, 768), (4095, 4096), (513, 5120),
         (255, 6152), (1023, 8192), (333, 12288), (257, 16376), (513, 16384), (1, 16384)]
VARIANT_CHECKS = [dict(reduce="kernel"), dict(K=1), dict(K=2), dict(K=3), dict(block=256), dict(per_sm=1, block=256),
                  dict(block=128, K=4), dict(prefetch=0), dict(prefetch=1), dict(prefetch=1, reduce="kernel")]


def cmd_check(args) -> int:
    rl.gpu.require()
    failed = 0
    start = time.time()
    print("v7_fast against the float64 reference (rel L2 / max |err|); inputs and outputs start random")
    for i, (N, C) in enumerate(SWEEP):
        for overwrite in (False, True):
            if overwrite and i % 2:  # overwrite mode on every other shape
                continue
            p = reference.random_problem(N, C, bf16.bfloat16, seed=1000 + i, accumulate=True)
            got = kernels.run(V7, p["dout"], p["inp"], p["weight"], p["rstd"], p["dinp"], p["dweight"],
                              overwrite=overwrite)
            a, b = compare(N, got, p, overwrite)
            L = kernels.launcher(V7, N, C, overwrite=overwrite)
            text, ok = line("v7_fast" + (" (dinp=)" if overwrite else ""), N, C, a, b, describe(L))
            print(text)
            failed += not ok
            if not ok:
                print(f"  {a}\n  {b}")
    print("launch variants (each on its own fresh launcher)")
    for C in (264, 1024, 4096, 8192):
        N = 2053
        p = reference.random_problem(N, C, bf16.bfloat16, seed=C, accumulate=True)
        for tuning in VARIANT_CHECKS:
            tuning = dict(tuning)
            block = tuning.pop("block", None)
            try:
                L = tuned_launcher(N, C, block=block, **tuning)
            except ValueError as exc:
                print(f"skip {tuning} block={block} at C={C}: {exc}")
                continue
            got = run_launcher(L, p)
            a, b = compare(N, got, p, False)
            text, ok = line(f"{tuning} b={block or 512}", N, C, a, b, describe(L))
            print(text)
            failed += not ok
    print("determinism: 20 runs each, bitwise; fused and kernel reductions bitwise equal")
    for N, C in ((4099, 1600), (2053, 16384), (65537, 768), (1, 8)):
        p = reference.random_problem(N, C, bf16.bfloat16, seed=N, accumulate=True)
        first = kernels.run(V7, p["dout"], p["inp"], p["weight"], p["rstd"], p["dinp"], p["dweight"])
        same = True
        for _ in range(19):
            again = kernels.run(V7, p["dout"], p["inp"], p["weight"], p["rstd"], p["dinp"], p["dweight"])
            same &= np.array_equal(bf16.bits(again[0]), bf16.bits(first[0]))
            same &= np.array_equal(bf16.bits(again[1]), bf16.bits(first[1]))
        other = run_launcher(tuned_launcher(N, C, reduce="kernel"), p)
        equal = (np.array_equal(bf16.bits(other[0]), bf16.bits(first[0]))
                 and np.array_equal(bf16.bits(other[1]), bf16.bits(first[1])))
        print(f"{'ok  ' if same and equal else 'FAIL'} N={N:<6} C={C:<6} 20 runs identical: {same}; "
              f"fused == kernel: {equal}")
        failed += not (same and equal)
    print(f"{failed} failed ({time.time() - start:.0f} s)")
    return 1 if failed else 0


# ----------------------------------------------------------------------------------------------------


def variants_for(C):
    """Launch variants worth timing at C (the default first)."""
    out = [dict(), dict(reduce="kernel")]
    chunks = C // 8
    default = kernels.v7_shape(C)
    out.append(dict(prefetch=int(not default.prefetch)))
    default_K = kernels.v7_shape(C, prefetch=False).K  # the K of dict(prefetch=0)
    for K in (2, 3, 4):
        if K != default_K and 32 * -(-chunks // (32 * K)) <= kernels.V7_MAX_BLOCK:
            out.append(dict(K=K, prefetch=0))
    if default.group <= 256:
        out.append(dict(block=256))  # two blocks of 256 per SM: more, smaller blocks
    if default.group <= 128:
        out.append(dict(block=128))
    return out


def cmd_variants(args) -> int:
    rl.gpu.require()
    copy = rl.gpu.copy_bandwidth()
    shapes = bench.LARGE_SHAPES + bench.SMALL_SHAPES
    rows = []
    print(f"copy bandwidth {copy:.0f} GB/s; v7_fast launch variants (accumulate mode unless marked)")
    print(f"{'variant':<26}{'N x C':>13}{'ms':>9}{'GB/s':>7}{'% copy':>8}  launch")
    for N, C in shapes:
        problem = bench.DeviceProblem(N, C, bf16.bfloat16)
        small = reference.random_problem(1031, C, bf16.bfloat16, seed=C + 7, accumulate=True)
        try:
            for tuning in variants_for(C) + [dict(overwrite=True)]:
                tuning = dict(tuning)
                block = tuning.pop("block", None)
                overwrite = tuning.pop("overwrite", False)
                tag = ",".join(f"{k}={v}" for k, v in tuning.items()) or "default"
                tag += f",b={block}" if block else ""
                tag += " (dinp=)" if overwrite else ""
                try:
                    L = tuned_launcher(N, C, overwrite=overwrite, block=block, **tuning)
                    check_L = tuned_launcher(1031, C, overwrite=overwrite, block=block, **tuning)
                except ValueError as exc:
                    print(f"skip {tag} at {N}x{C}: {exc}")
                    continue
                t = checked_timing(L, check_L, small, problem, copy, args.repeats, overwrite, f"v7[{tag}]")
                if t is None:
                    continue
                d = t.as_dict()
                d.update(variant=tag, launch=describe(L), spread=t.ms_spread)
                rows.append(d)
                print(f"{tag:<26}{f'{N}x{C}':>13}{t.ms:>9.4f}{t.gbps:>7.0f}{100 * t.fraction_of_copy:>7.1f}%  "
                      f"{describe(L)}")
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
        Path(args.json).write_text(json.dumps(dict(copy_gbps=copy, rows=rows), indent=1))
        print(f"wrote {args.json}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("check")
    p.set_defaults(func=cmd_check)
    p = sub.add_parser("variants")
    p.add_argument("--json")
    p.add_argument("--repeats", type=int, default=50)
    p.set_defaults(func=cmd_variants)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
