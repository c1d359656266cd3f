"""Where a launch's time goes, from %globaltimer stamps: the v9 variant that v7's staged path was taken from
(`v9w_b1024_r2`), built with V9_STAMPS, records per block of the main kernel its entry, its first row
landed, its row loop done and its partial row written, and per block of the final sum its entry and exit.

    python lab/v9_stamps.py [--variant v9w_b1024_r2] [--shapes NxC,...] [--json F]     # needs a GPU

Per shape and mode, over 7 launches (each after an untimed one of its own kind, CUDA events around each):
  ramp     last block's entry - first block's entry (the grid coming up)
  fill     median block: first row landed - entry (the ring's first copies, one load latency and more)
  stream   median block: row loop done - first row landed
  tail     last block's loop end - median block's loop end (the rows not dealt evenly)
  part     median block: partial row written - loop done
  gap      final sum's first entry - main kernel's last exit (the second launch's start)
  reduce   final sum's last exit - its first entry
  span     final sum's last exit - main kernel's first entry, against the event time
The issue asked for fixed costs "measured with %globaltimer stamps per phase, not inferred from a fit".
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import numpy as np
import v9_async

from rmsnorm_lessons.core import build, gpu, launch
from rmsnorm_lessons.speed import bench

PHASES = ("ramp", "fill", "stream", "tail", "part", "gap", "reduce", "span", "events")


def phases(main: np.ndarray, red: np.ndarray) -> dict:
    """Microseconds of each phase from one launch's stamps (ns): main (blocks x 4), red (blocks x 2)."""
    entry, first, done, written = (main[:, k].astype(np.int64) for k in range(4))
    us = lambda ns: float(ns) / 1e3  # noqa: E731
    return dict(ramp=us(entry.max() - entry.min()), fill=us(np.median(first - entry)),
                stream=us(np.median(done - first)), tail=us(done.max() - np.median(done)),
                part=us(np.median(written - done)), gap=us(red[:, 0].min() - written.max()),
                reduce=us(red[:, 1].max() - red[:, 0].min()), span=us(red[:, 1].max() - entry.min()))


def measure(name: str, N: int, C: int, overwrite: bool, launches: int = 7) -> dict:
    drv = gpu.driver()
    rung = v9_async.register(name, stamps=True)
    module = build.source_module(rung.name)
    stamps_ptr, _ = module.get_global("v9_stamps")
    reduce_ptr, _ = module.get_global("v9_reduce_stamps")
    plan = rung.plan(N, C, gpu.facts(), block=rung.block_size, overwrite=overwrite)
    grid, reducers = plan[0].grid, plan[1].grid
    problem = bench.DeviceProblem(N, C, rung.dtype)
    L = launch.launcher(rung, C, overwrite=overwrite)
    start, stop = drv.Event(), drv.Event()
    rows = []
    try:
        for i in range(launches + 1):
            zero = np.zeros((v9_async.STAMPED_BLOCKS, 4), np.uint64)
            drv.memcpy_htod(stamps_ptr, zero)
            drv.memcpy_htod(reduce_ptr, np.zeros((v9_async.STAMPED_BLOCKS, 2), np.uint64))
            L(N, problem.buffers[(2 * i) % problem.sets])  # untimed, of its own kind
            bench._sleep(bench.SLEEP_US)
            start.record()
            L(N, problem.buffers[(2 * i + 1) % problem.sets])
            stop.record()
            stop.synchronize()
            main = np.empty((v9_async.STAMPED_BLOCKS, 4), np.uint64)
            red = np.empty((v9_async.STAMPED_BLOCKS, 2), np.uint64)
            drv.memcpy_dtoh(main, stamps_ptr)
            drv.memcpy_dtoh(red, reduce_ptr)
            if i == 0:
                continue  # the first round warms up
            main, red = main[:grid], red[:reducers]
            if (main == 0).any() or (red == 0).any():
                raise AssertionError(f"{name} at {N}x{C}: a block left a stamp unwritten")
            rows.append({**phases(main, red), "events": 1e3 * stop.time_since(start)})
    finally:
        problem.free()
    out = {k: statistics.median(r[k] for r in rows) for k in PHASES}
    return dict(variant=name, N=N, C=C, overwrite=overwrite, grid=grid, reducers=reducers, us=out,
                launches=rows)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--variant", default="v9w_b1024_r2")
    p.add_argument("--shapes", default="16384x4096,32768x1024,8192x768,1024x4096")
    p.add_argument("--json", default="")
    args = p.parse_args(argv)
    gpu.require()
    results = []
    print(f"{'shape':<12} {'mode':<4} " + " ".join(f"{k:>7}" for k in PHASES) + "   (us, median of 7 launches)")
    for shape in args.shapes.split(","):
        N, C = map(int, shape.split("x"))
        for overwrite in (False, True):
            r = measure(args.variant, N, C, overwrite)
            results.append(r)
            print(f"{shape:<12} {'ow' if overwrite else 'acc':<4} " + " ".join(f"{r['us'][k]:7.2f}" for k in PHASES),
                  flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
