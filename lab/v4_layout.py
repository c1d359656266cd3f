"""Where v4_vec_bf16's time goes: its dweight staging in shared memory, three ways (lab/kernels/v4_layouts.cu).

    python lab/v4_layout.py [--json F] [--repeats 50] [--sass-only]

Registers the three layouts as rungs (``rmsnorm_lessons.core.ladder.rung_from_source``): ``v4lab_interleaved``
(v4 as it shipped until fab20df, which made kernels/v4_vec_bf16.cu planar), ``v4lab_planar``
(conflict-free) and ``v4lab_private`` (a shared row per warp, no atomics); prints their SASS (shared-memory
atomics, loads, stores) for sm_90, checks each against float64 at odd shapes, then times them beside v3_smem,
v4_vec_bf16 and v5_two_pass at the benchmark's shapes (bench.sweep: every row checked at its shape first,
copy bandwidth measured in the same run).
With --json the rows are written to F and the run is recorded in F's folder (MANIFEST.json).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import manifest

from rmsnorm_lessons.core import compare, gpu, ladder
from rmsnorm_lessons.core.ladder.rung import (BF16, Launch, Scratch, Tensor, ceil_div,
                                              persistent_grid, tensor_args)
from rmsnorm_lessons.inspection import sass
from rmsnorm_lessons.speed import bench

SOURCE = (Path(__file__).resolve().parent / "kernels" / "v4_layouts.cu").read_text()
LAYOUTS = {"v4lab_interleaved": 0, "v4lab_planar": 1, "v4lab_private": 2}
BLOCK = 256  # v4's block size
ADD_BLOCK = 256
CHECK_SHAPES = [(1031, 776), (517, 2056), (4099, 4096), (33, 8192)]
COMPARED = ["v3_smem", "v4_vec_bf16", "v4lab_interleaved", "v4lab_planar", "v4lab_private", "v5_two_pass"]


def _shared(private: bool):
    def shared_memory(C, block):
        return (block // 32 if private else 1) * C * 4
    return shared_memory


def _plan(private: bool):
    shared_memory = _shared(private)

    def plan(N, C, device, *, block, overwrite=False, config=None):
        smem = shared_memory(C, block)
        # v4's grid (4 blocks per SM); the warp-private layout: as many as its warps' rows let fit
        per_sm = max(1, min(4, device.shared_memory_per_multiprocessor // (smem + 1024))) if private else 4
        accum = Scratch("dweight_accum", C * 4, zero="each")
        return [
            Launch("rmsnorm_backward_v4lab", persistent_grid(N, block, device.multiprocessors, per_sm), block, smem,
                   (("dinp", Tensor("dinp")), ("dweight_accum", accum),
                    *tensor_args("dout", "inp", "weight", "rstd"), ("N", N), ("C", C))),
            Launch("add_dweight_v4lab", ceil_div(C, ADD_BLOCK), ADD_BLOCK, 0,
                   (("dweight", Tensor("dweight")), ("dweight_accum", accum), ("C", C))),
        ]
    return plan


def register() -> None:
    for name, staging in LAYOUTS.items():
        private = staging == 2
        ladder.rung_from_source(name=name, source=SOURCE, plan=_plan(private), shared_memory=_shared(private),
                                kernels=("rmsnorm_backward_v4lab", "add_dweight_v4lab"), dtype=BF16,
                                adds=f"v4 with V4_STAGING={staging}", c_multiple=8, block_size=BLOCK,
                                defines={"V4_STAGING": staging})


def sass_counts(arch: str = "sm_90") -> dict:
    rows = {}
    for name in ["v3_smem", "v4_vec_bf16", *LAYOUTS]:
        kernel = "rmsnorm_backward_v4lab" if name in LAYOUTS else ladder.get(name).kernels[0]
        listing = sass.listing(name, arch).functions[kernel].instructions
        ops = [i.opcode for i in listing]
        rows[name] = {key: sum(op.startswith(key) for op in ops)
                      for key in ("ATOMS", "LDS", "STS", "BSSY", "LDG", "STG")}
        print(f"{name:<18} " + " ".join(f"{k} {v:>3}" for k, v in rows[name].items()))
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", help="write the rows here (and record the run in its folder's MANIFEST.json)")
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--sass-only", action="store_true", help="only the SASS counts (no GPU needed)")
    args = parser.parse_args(argv)
    register()
    out = {"sass_sm_90": sass_counts()}
    if args.sass_only:
        return 0
    gpu.require()
    failures = 0
    out["checks"] = []
    for name in LAYOUTS:
        for N, C in CHECK_SHAPES:
            try:
                bench.runnable(name, N, C)
            except ValueError as exc:  # the warp-private rows do not fit at large C
                print(f"skip {name} at {N}x{C}: {exc}")
                continue
            report = compare.check_version(name, N, C, seed=N + C)
            out["checks"].append({"version": name, "N": N, "C": C, "ok": report.ok,
                                  "dinp_rel_l2": report.dinp.rel_l2_error,
                                  "dweight_rel_l2": report.dweight.rel_l2_error})
            print(f"{'ok  ' if report.ok else 'FAIL'} {name:<18} {N}x{C}")
            failures += not report.ok
    if failures:
        print(f"{failures} checks failed: not timing", file=sys.stderr)
        return 1
    copy = gpu.copy_bandwidth()
    print(f"copy bandwidth {copy:.0f} GB/s")
    results = bench.sweep(COMPARED, repeats=args.repeats, copy_gbps=copy)
    print(bench.table(results, baseline="v4_vec_bf16"))
    out["copy_gbps"] = copy
    out["rows"] = bench.records(results, baseline="v4_vec_bf16")
    if args.json:
        manifest.save(args.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
