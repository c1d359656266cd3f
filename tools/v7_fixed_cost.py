"""Where v7_fast's time goes beyond streaming its bytes: a sweep of N at fixed C (fit time = fixed + N * per_row),
for v7_fast as built, v7 without its final sum (dweight left unsummed: timing only), and the streaming
kernel of tools/v7_explore.py that moves the same bytes with no reduction.

    python3 tools/v7_fixed_cost.py [--json F]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import rmsnorm_lessons as rl  # noqa: E402
from rmsnorm_lessons import bench, bf16  # noqa: E402
from v7_explore import variant_launcher  # noqa: E402
from v7_gpu import V7  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json")
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument("--variants", default="default;base")
    args = parser.parse_args(argv)
    rl.gpu.require()
    copy = rl.gpu.copy_bandwidth()
    print(f"copy bandwidth {copy:.0f} GB/s")
    rows = []
    for C, ns in ((768, (4224, 8448, 16896, 25344, 32768, 33792)), (4096, (1056, 2112, 4224, 8448, 16384, 16896))):
        lines = {}
        for N in ns:
            problem = bench.DeviceProblem(N, C, bf16.bfloat16)
            try:
                for name in args.variants.split(";"):
                    for skip in (False, True):
                        L, _ = variant_launcher(name, N, C, False)
                        tag = name + (" no-final-sum" if skip else "")
                        if skip:  # partials written, no ticket, no final sum (dweight not updated)
                            L._v7 = dataclasses.replace(L._v7, reduce="none", reducers=0)
                        t = bench.bench_version(V7, N, C, copy, repeats=args.repeats, problem=problem, launcher=L,
                                                name=tag)
                        lines.setdefault(tag, []).append((N, t.ms))
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
        Path(args.json).write_text(json.dumps(dict(copy_gbps=copy, rows=rows), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
