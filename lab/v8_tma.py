"""The v8 experiment (lab/kernels/v8_tma.cu): rows staged in shared memory by bulk copies, clusters for wide rows.

    python lab/v8_tma.py check            # every variant against float64 at odd shapes, both modes, bitwise twice
    python lab/v8_tma.py bench [--json F] # v7, the v8 variants and the same-bytes ceiling, interleaved, per shape

Each variant is registered as a rung of its own (``ladder.rung_from_source``) whose plan fixes its choices,
so the package's launcher, check and buffers run it exactly as they run v7. The rows of a shape (v7,
each variant, the same-bytes ceiling; both modes) are timed interleaved (bench.time_interleaved).
"""
from __future__ import annotations

import argparse
import ctypes
import sys
from dataclasses import dataclass
from pathlib import Path

import variant_runs

from rmsnorm_lessons.core import gpu, ladder
from rmsnorm_lessons.core.ladder import BF16, Launch, Scratch, ceil_div, tensor_args, v7_fast
from rmsnorm_lessons.speed import bench

SOURCE = variant_runs.kernel_source("v8_tma.cu")
BLOCK = 512
MAX_STAGES = 8
CLUSTERS = (1, 2, 4, 8)
MAX_CHUNKS_PER_BLOCK = 4 * BLOCK  # K = 4 chunks of 8 channels per thread, 512 threads
STATIC_SHARED = 2048  # above the kernels' static shared memory (1152 B), for the slots' budget


@dataclass(frozen=True)
class Choice:
    """What a variant fixes; None leaves it to the rule."""

    K: int | None = None  # chunks per thread
    wide_K: int = 4  # chunks per thread where a row is split over a cluster
    split_above: int = 16384  # C above this is split over a cluster
    max_groups: int | None = None  # row groups per block
    max_stages: int = MAX_STAGES
    evict_first: bool = False


@dataclass(frozen=True)
class Shape:
    cluster: int
    per_rank: int  # chunks of a row per block
    K: int
    G: int
    groups: int
    stages: int  # row slots per group
    slot_bytes: int
    clusters: int

    @property
    def block(self) -> int:
        return self.groups * self.G

    @property
    def shared(self) -> int:
        return self.groups * self.stages * self.slot_bytes


def shape_for(N: int, C: int, device, overwrite: bool, choice: Choice) -> Shape:
    chunks = C // 8
    if C > choice.split_above:
        K = choice.wide_K
        cluster = next((cl for cl in CLUSTERS[1:] if ceil_div(chunks, cl) <= K * BLOCK), None)
        if cluster is None:
            raise ValueError(f"v8: C={C} needs more than {CLUSTERS[-1]} blocks of {K * BLOCK} chunks")
    else:
        cluster = 1
    per_rank = ceil_div(chunks, cluster)
    if (cluster - 1) * per_rank >= chunks:
        raise ValueError(f"v8: cluster {cluster} does not split C={C} ({chunks} chunks)")
    if cluster == 1:
        K = choice.K or min(4, max(1, ceil_div(per_rank, 32)))
    G = 32 * max(1, ceil_div(per_rank, 32 * K))
    if G > BLOCK:
        raise ValueError(f"v8: K={K} at C={C} needs {G} threads a row, more than {BLOCK}")
    groups = BLOCK // G
    if G > 32:
        groups = min(groups, 15)
    if cluster > 1:
        groups = 1
    if choice.max_groups:
        groups = min(groups, choice.max_groups)
    tensors = 2 if overwrite else 3
    slot_bytes = tensors * per_rank * 16
    stages = min(choice.max_stages, (device.shared_memory_per_block_optin - STATIC_SHARED) // (groups * slot_bytes))
    if stages < 2:
        raise ValueError(f"v8: {groups} groups' slots of {slot_bytes} B leave room for {stages} a group at C={C}")
    tiles = ceil_div(N, groups)
    clusters = max(1, min(device.multiprocessors // cluster, tiles))
    if cluster > 1:
        clusters = min(clusters, ACTIVE_CLUSTERS.get((cluster, groups * G, groups * stages * slot_bytes), clusters))
    return Shape(cluster, per_rank, K, G, groups, stages, slot_bytes, clusters)


#: (cluster, block, shared) -> clusters the driver can keep resident at once (filled by ask_active_clusters)
ACTIVE_CLUSTERS: dict = {}


def make_plan(choice: Choice):
    def plan(N, C, device, *, block, overwrite=False, config=None):
        s = shape_for(N, C, device, overwrite, choice)
        partials = Scratch("partials", s.clusters * C * 4)
        reducers = ceil_div(C, 4 * v7_fast.QUADS_PER_PASS)
        return [Launch(f"v8_cluster{s.cluster}", s.clusters * s.cluster, s.block, s.shared,
                       (*tensor_args("dinp"), ("partials", partials), *tensor_args("dout", "inp", "weight", "rstd"),
                        ("N", N), ("C", C), ("G", s.G), ("K", s.K), ("stages", s.stages),
                        ("accumulate", int(not overwrite)))),
                Launch("reduce_dweight_v7", reducers, BLOCK, 0,
                       (*tensor_args("dweight"), ("partials", partials), ("parts", s.clusters), ("C", C),
                        ("slices", reducers)))]
    return plan


def shared_memory(C: int, block: int) -> int:
    return 0  # the plan sizes the stages to the device; launch.py checks each launch against it


VARIANTS = {
    "v8": Choice(),
    "v8_k2": Choice(K=2),
    "v8_wide": Choice(wide_K=2, split_above=8192),  # C = 16384 split over 2 blocks, 32768 over 4, 65536 over 8
}


def register(name: str) -> ladder.Rung:
    choice = VARIANTS[name]
    return ladder.rung_from_source(
        name=name, source=SOURCE, plan=make_plan(choice), dtype=BF16, c_multiple=8, deterministic=True,
        block_size=BLOCK, max_block=BLOCK, overwrite_mode=True, shared_memory=shared_memory,
        kernels=("v8_cluster1", "v8_cluster2", "v8_cluster4", "v8_cluster8", "reduce_dweight_v7"),
        defines={**variant_runs.V7_DEFINES, "V8_EVICT_FIRST": int(choice.evict_first)},
        adds="lab: rows through shared memory by bulk copies; clusters for wide rows")


def describe(name: str, N: int, C: int, overwrite: bool) -> str:
    s = shape_for(N, C, gpu.facts(), overwrite, VARIANTS[name])
    return (f"cluster={s.cluster} K={s.K} G={s.G} groups={s.groups} block={s.block} stages={s.stages} "
            f"slot={s.slot_bytes // 1024} KiB shared={s.shared // 1024} KiB clusters={s.clusters}")


# --- the cluster occupancy the driver promises (cuOccupancyMaxActiveClusters) --------------------------
# PyCUDA's Function does not give its CUfunction, so the same source is compiled to a cubin and loaded
# through the driver API into the current (PyCUDA's) context, only to ask.

class _LaunchConfig(ctypes.Structure):
    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p), ("attrs", ctypes.c_void_p),
                ("numAttrs", ctypes.c_uint)]


_cubin_module = None


def max_active_clusters(cluster: int, block: int, shared: int) -> int:
    global _cubin_module
    from rmsnorm_lessons.core import build
    lib = ctypes.CDLL("libcuda.so.1")
    if _cubin_module is None:
        major, minor = gpu.facts().compute_capability
        cubin = build.compile_source(SOURCE, arch=f"sm_{major}{minor}", name="v8_tma",
                                     defines={**variant_runs.V7_DEFINES, "V8_EVICT_FIRST": 0}).binary
        module = ctypes.c_void_p()
        rc = lib.cuModuleLoadData(ctypes.byref(module), ctypes.c_char_p(cubin))
        if rc:
            raise RuntimeError(f"cuModuleLoadData: CUresult {rc}")
        _cubin_module = module
    function = ctypes.c_void_p()
    rc = lib.cuModuleGetFunction(ctypes.byref(function), _cubin_module, f"v8_cluster{cluster}".encode())
    if rc:
        raise RuntimeError(f"cuModuleGetFunction: CUresult {rc}")
    rc = lib.cuFuncSetAttribute(function, 8, ctypes.c_int(shared))  # MAX_DYNAMIC_SHARED_SIZE_BYTES
    if rc:
        raise RuntimeError(f"cuFuncSetAttribute: CUresult {rc}")
    cfg = _LaunchConfig(cluster * 64, 1, 1, block, 1, 1, shared, None, None, 0)
    out = ctypes.c_int(0)
    rc = lib.cuOccupancyMaxActiveClusters(ctypes.byref(out), function, ctypes.byref(cfg))
    if rc:
        raise RuntimeError(f"cuOccupancyMaxActiveClusters: CUresult {rc}")
    return out.value


def ask_active_clusters(names, shapes) -> None:
    """Fill ACTIVE_CLUSTERS for every split shape the variants make, printing what the driver says."""
    device = gpu.facts()
    for name in names:
        for N, C in shapes:
            for overwrite in (False, True):
                try:
                    s = shape_for(N, C, device, overwrite, VARIANTS[name])
                except ValueError:
                    continue
                key = (s.cluster, s.block, s.shared)
                if s.cluster == 1 or key in ACTIVE_CLUSTERS:
                    continue
                try:
                    ACTIVE_CLUSTERS[key] = max_active_clusters(*key)
                    print(f"clusters of {s.cluster} x {s.block} threads, {s.shared} B shared: the driver keeps "
                          f"{ACTIVE_CLUSTERS[key]} resident ({device.multiprocessors // s.cluster} would fill the SMs)")
                except (OSError, RuntimeError) as exc:
                    print(f"could not ask the driver about clusters of {s.cluster}: {exc}")


# --- check -----------------------------------------------------------------------------------------------

CHECK_SHAPES = [(1031, 768), (17, 776), (3, 1024), (2053, 1032), (333, 4104), (129, 16384), (67, 16392),
                (40, 32768), (33, 65536), (21, 65528), (5, 40000), (1, 24)]


def cmd_check(args) -> int:
    names = args.variants.split(",")
    gpu.require()
    ask_active_clusters(names, CHECK_SHAPES)
    return 1 if variant_runs.check_variants(names, CHECK_SHAPES, register, describe) else 0


# --- bench -----------------------------------------------------------------------------------------------

SHAPES = bench.SHAPES


def cmd_bench(args) -> int:
    names = args.variants.split(",")
    gpu.require()
    shapes = variant_runs.parse_shapes(args.shapes, SHAPES)
    ask_active_clusters(names, shapes)
    variant_runs.bench_variants(names, shapes, register, describe, args.repeats, args.json)
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check")
    c.add_argument("--variants", default=",".join(VARIANTS))
    b = sub.add_parser("bench")
    b.add_argument("--variants", default=",".join(VARIANTS))
    b.add_argument("--shapes", default="", help="NxC,NxC (default: the bench's and two wide ones)")
    b.add_argument("--repeats", type=int, default=60)
    b.add_argument("--json")
    args = parser.parse_args(argv)
    return {"check": cmd_check, "bench": cmd_bench}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
