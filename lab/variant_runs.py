"""What the staging experiments (v8_tma.py, v9_async.py) share: their variants checked against float64 and
run twice for bitwise equality, and timed beside v7 and the same-bytes ceiling, interleaved per shape.

A script passes its variant names, a ``register(name)`` that registers a variant as a rung, and a
``describe(name, N, C, overwrite)`` that says what the variant launches there (ValueError: it does not run
that shape, which is skipped).
"""
from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

import numpy as np

import rmsnorm_lessons as rl
from rmsnorm_lessons.core import bf16, compare, gpu, ladder, launch, reference
from rmsnorm_lessons.core.ladder import v7_fast
from rmsnorm_lessons.speed import bench

KERNELS = Path(__file__).resolve().parent / "kernels"
#: what the frozen v7 (lab/kernels/frozen/v7_fast.cu) must be built with: the values
#: rmsnorm_lessons/core/ladder/v7_fast.py gave it when it was frozen
V7_DEFINES = {"V7_MAX_BLOCK": 512, "V7_QUADS_PER_PASS": 32, "V7_REDUCE_BATCH": 9, "V7_STAGED_BLOCK": 1024}


def kernel_source(name: str) -> str:
    """lab/kernels/<name> with the lab's own headers it includes written into it (the frozen copy of v7
    in lab/kernels/frozen/), so that it compiles wherever the package puts its source."""
    seen = set()

    def expand(path: Path) -> str:
        out = []
        for line in path.read_text().splitlines(keepends=True):
            m = re.match(r'\s*#include\s+"([^"]+)"', line)
            header = (path.parent / m.group(1)).resolve() if m else None
            if header is not None and header.is_file() and KERNELS in header.parents:
                if header not in seen:
                    seen.add(header)
                    out.append(expand(header))
                continue
            out.append(line)
        return "".join(out)

    return expand(KERNELS / name)


def check_variants(names, shapes, register, describe) -> int:
    """Each variant at each shape in both modes against float64, then twice for the same bits; the number failed."""
    failed = 0
    gpu.require()
    for name in names:
        register(name)
        for N, C in shapes:
            for overwrite in (False, True):
                try:
                    how = describe(name, N, C, overwrite)
                except ValueError as exc:
                    print(f"skip {name} {N}x{C}: {exc}")
                    continue
                report = compare.check_version(name, N, C, seed=N * 7 + C, overwrite=overwrite)
                p = reference.random_problem(N, C, bf16.bfloat16, seed=N + C, accumulate=True)
                runs = [rl.run(name, p["dout"], p["inp"], p["weight"], p["rstd"], p["dinp"], p["dweight"],
                                    overwrite=overwrite) for _ in range(2)]
                same = all(np.array_equal(bf16.bits(a), bf16.bits(b)) for a, b in zip(*runs))
                ok = report.ok and same
                failed += not ok
                mode = "(dinp=)" if overwrite else "(+=)   "
                print(f"{'ok  ' if ok else 'FAIL'} {name:<8} {mode} {N:>5}x{C:<6} {how}"
                      f"{'' if same else '  NOT BITWISE REPEATABLE'}")
                if not report.ok:
                    print(report)
        sys.stdout.flush()
    print(f"{failed} failed")
    return failed


def bench_variants(names, shapes, register, describe, repeats: int, json_path=None) -> None:
    """v7_fast (where it runs the C) and each variant in both modes, with the ceiling, interleaved per shape;
    prints a table per shape and, with ``json_path``, writes every row with what the variant launched."""
    for name in names:
        register(name)
    gpu.require()
    yardstick = bench.copy_yardstick()
    print(yardstick)
    results, how = [], {}
    for N, C in shapes:
        t0 = time.time()
        rows = []
        for name in (["v7_fast"] if C <= v7_fast.MAX_C else []) + list(names):
            for overwrite in (False, True):
                try:
                    launch.launcher(name, C, overwrite=overwrite).plan(N)
                except ValueError as exc:
                    print(f"skip {name} at {N}x{C}: {exc}")
                    continue
                rows.append((ladder.get(name), overwrite))
                if name != "v7_fast":
                    how[(bench.overwrite_name(name) if overwrite else name, N, C)] = describe(name, N, C, overwrite)
        shape = bench.time_shape(N, C, rows, (False, True), yardstick.gbps, repeats)
        results += shape
        print(f"--- {N}x{C} ({time.time() - t0:.1f} s)")
        print(bench.table(shape))
        sys.stdout.flush()
    if json_path:
        records = bench.records(results, baseline=None)
        for r in records:
            r.update(how=how.get((r["name"], r["N"], r["C"]), ""), dtod_gbps=yardstick.dtod_gbps,
                     kernel_copy_gbps=yardstick.kernel_gbps)
        Path(json_path).write_text(json.dumps(records, indent=1))
    for key, text in how.items():
        print(f"{key[0]} at {key[1]}x{key[2]}: {text}")


def parse_shapes(text: str, default):
    """"NxC,NxC" as a list of (N, C); the default where empty."""
    return default if not text else [tuple(map(int, s.split("x"))) for s in text.split(",")]
