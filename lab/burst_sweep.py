"""The steady state at every shape: v7 in both modes and two spellings of the same-bytes ceiling, each timed
in bursts of back-to-back launches on rotating buffer sets (each launch's predecessor is itself, so each
pays for the dirty L2 lines it leaves behind, as in a loop); the bursts of the different kernels
interleaved round by round. lab/neighbour_probe.py showed why: a launch timed alone after a 200 us sleep
costs 0.107-0.121 ms at 16384x4096 (v7, dinp=) depending on what ran before it.

    python lab/burst_sweep.py [--json F]     # needs a GPU
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import ceiling_probe

from rmsnorm_lessons.core import gpu, ladder, launch
from rmsnorm_lessons.speed import bench

BURST = 20


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", default="")
    p.add_argument("--rounds", type=int, default=12)
    args = p.parse_args(argv)
    gpu.require()
    drv = gpu.driver()
    mod = ceiling_probe.module()
    v7 = ladder.get("v7_fast")
    copy = ceiling_probe.copies(mod, 20)
    copy_gbps = max(copy.values())
    print("copy " + ", ".join(f"{k} {v:.0f}" for k, v in copy.items()) + " GB/s", flush=True)
    out = []
    start, stop = drv.Event(), drv.Event()
    for N, C in bench.SHAPES:
        problem = bench.DeviceProblem(N, C, v7.dtype)
        sets = bench.rotation(problem.sets, BURST)
        n16 = N * C // 8

        def b(i):
            return problem.buffers[i % sets]
        kernels = {}
        for ow in (False, True):
            sfx = " (dinp=)" if ow else ""
            L = launch.launcher(v7, C, overwrite=ow)
            s = ceiling_probe.launcher(mod, "gridstride_elementwise", n16, 4, accumulate=not ow)
            f = ceiling_probe.launcher(mod, "elementwise_flat", n16, 0, accumulate=not ow)
            kernels["v7" + sfx] = (ow, lambda i, L=L: L(N, b(i)))
            # (the run of 2026-12-03 called this one "stream ceiling": the bench's ceiling then)
            kernels["gridstride ceiling" + sfx] = (ow, lambda i, s=s: s((b(i).dinp, b(i).dout, b(i).inp)))
            kernels["flat ceiling" + sfx] = (ow, lambda i, f=f: f((b(i).dinp, b(i).dout, b(i).inp)))
        times = {k: [] for k in kernels}
        turn = 0
        for r in range(args.rounds + 1):
            for name, (_, T) in kernels.items():
                bench._sleep(BURST * 100)
                start.record()
                for _ in range(BURST):
                    T(turn)
                    turn += 1
                stop.record()
                stop.synchronize()
                if r:
                    times[name].append(stop.time_since(start) / BURST)
        problem.free()
        line = []
        for name, (ow, _) in kernels.items():
            ms = statistics.median(times[name])
            nbytes = v7.bytes_moved(N, C, overwrite=ow)
            pct = 100 * nbytes / (ms * 1e-3) / 1e9 / copy_gbps
            out.append(dict(N=N, C=C, name=name, ms=ms, pct_copy=pct, times=times[name]))
            line.append(f"{name} {ms:.4f} ({pct:.1f}%)")
        best = {ow: min(r["ms"] for r in out[-6:] if r["name"].startswith(("gridstride", "flat")) and
                        r["name"].endswith("(dinp=)") == ow) for ow in (False, True)}
        v7ms = {ow: next(r["ms"] for r in out[-6:] if r["name"] == "v7" + (" (dinp=)" if ow else ""))
                for ow in (False, True)}
        print(f"{N}x{C}: " + "  ".join(line) + f"  | v7 % of the best ceiling: {100 * best[False] / v7ms[False]:.1f} / "
              f"{100 * best[True] / v7ms[True]:.1f}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(dict(copy=copy, rows=out), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
