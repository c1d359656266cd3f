"""Does a timed launch pay for the launch before it? In one process at 16384x4096, v7 (dinp=) timed with 2
rows took 0.1175 ms and with 4 rows 0.1108 ms (results/NOTES.md): the same kernel, its neighbours differing.
A hypothesis: L2 is write-back, so a kernel leaves up to an L2 of dirty lines behind (the 200 us sleep
before each timed launch touches no memory), and whichever launch comes next pays for writing them.

    python lab/neighbour_probe.py [--json F]     # needs a GPU
    python lab/neighbour_probe.py --profile "v7 (dinp=)" --shapes 16384x4096
        # only 6 x (that predecessor, the sleep, v7 (dinp=)): for Nsight Compute with --cache-control none,
        # to count the DRAM bytes each v7 launch writes after it (lab/gpu-neighbour.sh)

For each timed kernel T (v7 and two spellings of the ceiling, overwrite mode) and each predecessor P,
the loop is: P on one buffer set, the sleep, then T timed alone on the next set. Then T in bursts: the
sleep, then B launches of T back to back on rotating sets, timed together (each launch's predecessor is
itself: the steady state of a loop, which pays its own write-backs).
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import ceiling_probe
import numpy as np

from rmsnorm_lessons.core import gpu, ladder, launch
from rmsnorm_lessons.speed import bench

BURST = 20


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", default="")
    p.add_argument("--repeats", type=int, default=30)
    p.add_argument("--shapes", default="16384x4096,32768x1024")
    p.add_argument("--profile", default="", help="a predecessor's name: run only it and v7 (dinp=), 6 times")
    args = p.parse_args(argv)
    gpu.require()
    drv = gpu.driver()
    mod = ceiling_probe.module()
    v7 = ladder.get("v7_fast")
    out = []
    for shape in args.shapes.split(","):
        N, C = map(int, shape.split("x"))
        problem = bench.DeviceProblem(N, C, v7.dtype)
        sets = bench.rotation(problem.sets, 2)
        n16 = N * C // 8
        L_acc, L_ow = launch.launcher(v7, C), launch.launcher(v7, C, overwrite=True)
        gridstride = ceiling_probe.launcher(mod, "gridstride_elementwise", n16, 4, accumulate=False)
        flat = ceiling_probe.launcher(mod, "elementwise_flat", n16, 0, accumulate=False)
        flush_bytes = 4 * gpu.facts().l2_bytes
        flush_buf = drv.mem_alloc(flush_bytes)
        drv.memset_d8(flush_buf, 0, flush_bytes)
        flush_dst = drv.mem_alloc(16)

        def b(i):
            return problem.buffers[i % sets]
        kernels = {
            "v7 (dinp=)": lambda i: L_ow(N, b(i)),
            # (the run of 2026-12-03 called this one "stream ceiling": the bench's ceiling then)
            "gridstride ceiling (dinp=)": lambda i: gridstride((b(i).dinp, b(i).dout, b(i).inp)),
            "flat ceiling (dinp=)": lambda i: flat((b(i).dinp, b(i).dout, b(i).inp)),
        }
        # the flush: every thread reads its chunks and keeps one (a read-only sweep of 4 L2s evicts the dirty
        # lines, which are written back now rather than inside the next timed launch)
        read_fn = mod.get_function("read_sweep")

        def flush(i):
            read_fn(flush_buf, np.int64(flush_bytes // 16), flush_dst, block=(256, 1, 1),
                    grid=(gpu.facts().multiprocessors * 8, 1, 1))
        predecessors = {"nothing": None, "v7 (acc)": lambda i: L_acc(N, b(i)), "v7 (dinp=)": kernels["v7 (dinp=)"],
                        "gridstride ceiling (dinp=)": kernels["gridstride ceiling (dinp=)"],
                        "flat ceiling (dinp=)": kernels["flat ceiling (dinp=)"], "L2 flush (read)": flush}
        start, stop = drv.Event(), drv.Event()
        if args.profile:
            P = predecessors[args.profile]
            for r in range(6):
                if P is not None:
                    P(2 * r)
                bench._sleep(bench.SLEEP_US)
                kernels["v7 (dinp=)"](2 * r + 1)
            drv.Context.synchronize()
            flush_buf.free()
            flush_dst.free()
            problem.free()
            continue
        for tname, T in kernels.items():
            for pname, P in predecessors.items():
                times, turn = [], 0
                for r in range(args.repeats + 3):
                    if P is not None:
                        P(turn)
                    turn += 1
                    bench._sleep(bench.SLEEP_US)
                    start.record()
                    T(turn)
                    stop.record()
                    stop.synchronize()
                    turn += 1
                    if r >= 3:
                        times.append(stop.time_since(start))
                ms = statistics.median(times)
                out.append(dict(N=N, C=C, timed=tname, before=pname, ms=ms))
                print(f"{N}x{C} {tname:24s} after {pname:24s} {ms:.4f} ms", flush=True)
            times = []
            for r in range(args.repeats // 3 + 2):
                bench._sleep(BURST * 100)  # long enough for the host to queue the burst behind it
                start.record()
                for k in range(BURST):
                    T(r * BURST + k)
                stop.record()
                stop.synchronize()
                if r >= 2:
                    times.append(stop.time_since(start) / BURST)
            ms = statistics.median(times)
            out.append(dict(N=N, C=C, timed=tname, before=f"burst of {BURST}", ms=ms))
            print(f"{N}x{C} {tname:24s} in a burst of {BURST:<14d} {ms:.4f} ms", flush=True)
        flush_buf.free()
        flush_dst.free()
        problem.free()
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
