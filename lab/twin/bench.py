"""The CPU twin's cost per kernel exercise: compile (cold and cached, -O1 and -O2) and the check's
run at its shapes (rmsnorm_lessons.twin.rungs.CHECK_SHAPES), hazard tracking on and off.

    python lab/twin/bench.py > results/twin/bench.txt

The exercises' solutions are read from the notebooks (tests/_mutations.solution_text). Cold means
an empty cache: the runtime's objects (once per machine, timed apart) and then the kernel.
"""
from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from rmsnorm_lessons import twin  # noqa: E402
from rmsnorm_lessons.core import ladder, reference  # noqa: E402
from rmsnorm_lessons.course import registry  # noqa: E402
from rmsnorm_lessons.twin import compile, rungs  # noqa: E402

import _mutations  # noqa: E402

LIKE = {"02": "v1_naive", "03": "v2_warp", "04": "v3_smem", "06": "v4_vec_bf16",
        "07": "v5_two_pass", "08": "v6_last_block", "13": "v3_smem"}


def _check_run(rung, hazards: bool, opt: str) -> tuple[float, int, int]:
    """Seconds to run the check's shapes (the child processes included), hazards found, fiber
    switches."""
    started, found, switches = time.perf_counter(), 0, 0
    for k, (N, C, device) in enumerate(rungs.check_shapes(rung)):
        p = reference.random_problem(N, C, rung.dtype, seed=k, accumulate=True)
        got = rungs.run_rung(rung, p["dout"], p["inp"], p["weight"], p["rstd"], p["dinp"],
                             p["dweight"], device=device, hazards=hazards, opt=opt)
        found += len(got.hazards)
        switches += got.switches
    return time.perf_counter() - started, found, switches


def main() -> None:
    cache = tempfile.mkdtemp(prefix="twin-bench-")
    os.environ["RMSNORM_CACHE_DIR"] = cache
    print(f"g++: {compile.cxx_version(compile.require_cxx()).splitlines()[0]}; "
          f"{os.cpu_count()} CPUs")
    for opt in ("-O1", "-O2"):
        t = time.perf_counter()
        compile.runtime_objects(opt)
        print(f"runtime objects {opt}, cold: {time.perf_counter() - t:.2f} s (once per machine)")
    print(f"{'exercise':<18} {'opt':<4} {'cold s':>7} {'cached s':>8} {'run on s':>8} "
          f"{'run off s':>9} {'hazards':>7} {'switches':>9}  shapes")
    for lesson in registry.kernel_exercises():
        like = LIKE.get(lesson.stem[:2])
        if like is None:
            continue
        text = _mutations.solution_text(lesson)
        for opt in ("-O1", "-O2"):
            rung = ladder.rung_from_source(name=f"bench_{lesson.stem[:2]}_{opt[2:]}",
                                           source=f'#line 1 "bench"\n{text}', like=like)
            t = time.perf_counter()
            rungs.build_rung(rung, True, opt)
            cold = time.perf_counter() - t
            rungs.build_rung(rung, False, opt)
            t = time.perf_counter()
            rungs.build_rung(rung, True, opt)
            cached = time.perf_counter() - t
            on, found, switches = _check_run(rung, True, opt)
            off, _, _ = _check_run(rung, False, opt)
            shapes = ", ".join(f"{N}x{C}" + ("/2SM" if d else "")
                               for N, C, d in rungs.check_shapes(rung))
            print(f"{lesson.stem:<18} {opt:<4} {cold:7.2f} {cached:8.3f} {on:8.2f} {off:9.2f} "
                  f"{found:7d} {switches:9d}  {shapes}", flush=True)
    print(f"twin available: {twin.available() or 'yes'}")


if __name__ == "__main__":
    main()
