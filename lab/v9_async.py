"""The v9 experiment (lab/kernels/v9_async.cu): rows staged in shared memory by per-thread cp.async copies.

    python lab/v9_async.py check            # every variant against float64 at odd shapes, both modes, bitwise twice
    python lab/v9_async.py bench [--json F] # v7, the v9 variants and the same-bytes ceiling, interleaved, per shape
    python lab/v9_async.py plans            # what each variant launches at the bench's shapes (no GPU needed)

Each variant is registered as a rung of its own (``ladder.rung_from_source``) whose plan fixes its choices,
so the package's launcher, check and buffers run it exactly as they run v7. A variant is a build (threads a
block, the largest K it holds without spilling) and a rule for the ring's depth.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import variant_runs

from rmsnorm_lessons.core import gpu, ladder
from rmsnorm_lessons.core.ladder import BF16, Launch, Scratch, ceil_div, tensor_args, v7_fast
from rmsnorm_lessons.speed import bench

SOURCE = variant_runs.kernel_source("v9_async.cu")
STATIC_SHARED = 1024  # above the kernel's static shared memory (256 B), kept out of the ring's budget
MAX_GROUPS = 15  # row groups of more than one warp each own a named barrier, 1..15


@dataclass(frozen=True)
class Variant:
    block: int  # threads a block, one block an SM (__launch_bounds__(block, 1))
    max_K: int  # the largest K the build holds in its registers
    max_stages: int = 8  # row slots a group's ring has at most (the kernel waits on at most 7 pending)
    weight_f32: bool = False  # weight held widened to fp32 (K x 8 registers) instead of packed bf16 pairs
    rstd_at: int = 1  # where rstd is loaded: 0 at the row, 1 a row ahead at the top, 2 a row ahead after the dot


VARIANTS = {
    "v9": Variant(512, 4),
    "v9_s2": Variant(512, 4, max_stages=2),
    "v9_b768": Variant(768, 3),
    "v9_b1024": Variant(1024, 2),
    "v9w": Variant(512, 4, weight_f32=True),
    "v9w_b1024": Variant(1024, 2, weight_f32=True),
    # rstd's placement, the one difference left between v9w_b1024 and v7's staged kernel (kernels/NOTES.md)
    "v9w_b1024_r0": Variant(1024, 2, weight_f32=True, rstd_at=0),
    "v9w_b1024_r2": Variant(1024, 2, weight_f32=True, rstd_at=2),
    # one chunk a thread: C = 768 in row groups of 96 threads (three warps), no idle lane (K = 2 idles 1/4)
    "v9w_b1024_k1": Variant(1024, 1, weight_f32=True),
}


@dataclass(frozen=True)
class Shape:
    K: int
    G: int
    groups: int
    stages: int
    slot_bytes: int
    grid: int

    @property
    def block(self) -> int:
        return self.groups * self.G

    @property
    def shared(self) -> int:
        return self.groups * self.stages * self.slot_bytes


def shape_for(N: int, C: int, device, overwrite: bool, v: Variant) -> Shape:
    chunks = C // 8
    G = 32 * ceil_div(chunks, 32 * v.max_K)
    if G > v.block:
        raise ValueError(f"v9: C={C} needs {G} threads a row at K <= {v.max_K}, more than a block of {v.block}")
    K = ceil_div(chunks, G)
    groups = v.block // G
    if G > 32:
        groups = min(groups, MAX_GROUPS)
    slot_bytes = (2 if overwrite else 3) * G * K * 16
    budget = device.shared_memory_per_block_optin - STATIC_SHARED
    while groups > 1 and budget // (groups * slot_bytes) < 2:
        groups -= 1
    stages = min(v.max_stages, budget // (groups * slot_bytes))
    if stages < 2:
        raise ValueError(f"v9: two row slots of {slot_bytes} B do not fit at C={C}")
    grid = max(1, min(device.multiprocessors, ceil_div(N, groups)))
    return Shape(K, G, groups, stages, slot_bytes, grid)


def make_plan(v: Variant, reduce: str = "reduce_dweight_v7"):
    def plan(N, C, device, *, block, overwrite=False, config=None):
        s = shape_for(N, C, device, overwrite, v)
        partials = Scratch("partials", s.grid * C * 4)
        reducers = ceil_div(C, 4 * v7_fast.QUADS_PER_PASS)
        return [Launch("v9_async", s.grid, s.block, max(s.shared, s.groups * C * 4),
                       (*tensor_args("dinp"), ("partials", partials), *tensor_args("dout", "inp", "weight", "rstd"),
                        ("N", N), ("C", C), ("G", s.G), ("K", s.K), ("stages", s.stages),
                        ("accumulate", int(not overwrite)))),
                Launch(reduce, reducers, v7_fast.MAX_BLOCK, 0,
                       (*tensor_args("dweight"), ("partials", partials), ("parts", s.grid), ("C", C),
                        ("slices", reducers)))]
    return plan


#: blocks whose phases the stamped builds record (lab/v9_stamps.py); more than any grid here launches
STAMPED_BLOCKS = 1024


def register(name: str, stamps: bool = False) -> ladder.Rung:
    """Register variant ``name`` as a rung; with ``stamps``, as ``<name>_stamps``, built with V9_STAMPS so that
    every block of both kernels records %globaltimer at its phases (lab/v9_stamps.py reads them)."""
    v = VARIANTS[name]
    reduce = "reduce_dweight_v9" if stamps else "reduce_dweight_v7"
    defines = {**variant_runs.V7_DEFINES, "V9_BLOCK": v.block, "V9_MAX_K": v.max_K, "V9_WEIGHT_F32": int(v.weight_f32),
               "V9_RSTD": v.rstd_at}
    if stamps:
        defines["V9_STAMPS"] = STAMPED_BLOCKS
    return ladder.rung_from_source(
        name=name + ("_stamps" if stamps else ""), source=SOURCE, plan=make_plan(v, reduce), dtype=BF16,
        c_multiple=8, deterministic=True, block_size=v.block, max_block=v.block, overwrite_mode=True,
        shared_memory=lambda C, block: 0, kernels=("v9_async", reduce), defines=defines,
        adds="lab: rows through shared memory by per-thread cp.async; dweight in registers")


def describe(name: str, N: int, C: int, overwrite: bool, device=None) -> str:
    s = shape_for(N, C, device or gpu.facts(), overwrite, VARIANTS[name])
    return (f"K={s.K} G={s.G} groups={s.groups} block={s.block} stages={s.stages} "
            f"slot={s.slot_bytes / 1024:.1f} KiB shared={s.shared // 1024} KiB grid={s.grid}")


# --- check -----------------------------------------------------------------------------------------------

CHECK_SHAPES = [(1031, 768), (17, 776), (3, 1024), (2053, 1032), (500, 2056), (333, 4104), (129, 8200),
                (129, 16384), (67, 16376), (1, 24), (40000, 64)]


def cmd_check(args) -> int:
    return 1 if variant_runs.check_variants(args.variants.split(","), CHECK_SHAPES, register, describe) else 0


# --- bench -----------------------------------------------------------------------------------------------

def cmd_bench(args) -> int:
    shapes = variant_runs.parse_shapes(args.shapes, bench.LARGE_SHAPES + bench.SMALL_SHAPES)
    variant_runs.bench_variants(args.variants.split(","), shapes, register, describe, args.repeats, args.json)
    return 0


def cmd_plans(args) -> int:
    device = gpu.facts_or_fallback()[0]
    for name in args.variants.split(","):
        for N, C in bench.LARGE_SHAPES + bench.SMALL_SHAPES:
            for overwrite in (False, True):
                print(f"{name:<9} {'(dinp=)' if overwrite else '(+=)   '} {N:>5}x{C:<6} "
                      f"{describe(name, N, C, overwrite, device)}")
    return 0


def cmd_profile(args) -> int:
    """Launch one variant (or v7_fast) a few times at one shape, for Nsight Compute (lab/profile_v7.py, after
    registering the variant): ncu --kernel-name regex:'v9_async|rmsnorm_backward_v7$' --launch-skip 3 ..."""
    import profile_v7

    if args.name in VARIANTS:
        register(args.name)
    return profile_v7.main([args.name, str(args.N), str(args.C)] + (["--overwrite"] if args.overwrite else []))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    for cmd in ("check", "bench", "plans"):
        p = sub.add_parser(cmd)
        p.add_argument("--variants", default=",".join(VARIANTS))
        if cmd == "bench":
            p.add_argument("--shapes", default="", help="NxC,NxC (default: the bench's large and small shapes)")
            p.add_argument("--repeats", type=int, default=60)
            p.add_argument("--json")
    p = sub.add_parser("profile")
    p.add_argument("name")
    p.add_argument("N", type=int)
    p.add_argument("C", type=int)
    p.add_argument("--overwrite", action="store_true")
    args = parser.parse_args(argv)
    return {"check": cmd_check, "bench": cmd_bench, "plans": cmd_plans, "profile": cmd_profile}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
