"""Programmatic dependent launch (PDL) for v7's two launches (issue 32): does letting the final sum be
dispatched while the main kernel's blocks finish (and the next call's main kernel while the final sum
runs) take the gap between launches out of a call's fixed cost?

    python lab/pdl_probe.py layout          # no GPU: these ctypes structs against cuda.h (nvcc)
    python lab/pdl_probe.py check           # GPU, sm_90: float64 and bitwise against v7 as shipped
    python lab/pdl_probe.py bench [--shapes NxC,...] [--repeats R] [--json F]      # GPU, sm_90

The kernels are lab/kernels/v7_pdl.cu: the course's v7_fast as it ships plus entry points that
execute griddepcontrol.launch_dependents and griddepcontrol.wait at entry (SASS: PREEXIT, ACQBULK),
so the work and its order are the shipped kernel's. Four spellings of one call, interleaved with the
same-bytes ceiling at each shape and mode:
  shipped  the package's launcher (PyCUDA), as the course runs v7_fast
  ctypes   the same two kernels through cuLaunchKernelEx, no attribute: the launch path alone
  pdl      the final sum launched with PROGRAMMATIC_STREAM_SERIALIZATION; it waits at entry
  pdl2     pdl, and the main kernel launched with it too: its blocks are dispatched while the
           previous call's final sum runs, and wait at entry
The cluster path (C above one block's row) is not wrapped: shapes that take it are skipped.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import v7lab

from rmsnorm_lessons.core import bf16, build, gpu, launch, libcuda
from rmsnorm_lessons.core.ladder import Scratch, Tensor, v7_fast
from rmsnorm_lessons.speed import bench, timing

KERNEL_FILE = Path(__file__).resolve().parent / "kernels" / "v7_pdl.cu"
SPELLINGS = ("shipped", "ctypes", "pdl", "pdl2")
CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = (
    libcuda.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION)
CHECK_SHAPES = ((1031, 776), (97, 768), (4099, 2056), (257, 4104), (1, 8), (3, 16), (2053, 1024))
BENCH_SHAPES = "32768x768,32768x1024,16384x2048,16384x4096,8192x768,1024x4096"
PDL_KERNELS = {"rmsnorm_backward_v7": "rmsnorm_backward_v7_pdl",
               "rmsnorm_backward_v7_staged": "rmsnorm_backward_v7_staged_pdl",
               "reduce_dweight_v7": "reduce_dweight_v7_pdl"}


# the driver's launch structs, shared with the package (rmsnorm_lessons/core/libcuda.py)
AttributeValue, LaunchAttribute, LaunchConfig = (libcuda.AttributeValue, libcuda.LaunchAttribute,
                                                 libcuda.LaunchConfig)


LAYOUT_PROBE = r"""
#include <cuda.h>
#include <cstddef>
#include <cstdio>
int main() {
    std::printf("%zu %zu %zu %zu %zu %zu %zu %d\n", sizeof(CUlaunchAttribute),
                offsetof(CUlaunchAttribute, value), sizeof(CUlaunchAttributeValue),
                sizeof(CUlaunchConfig), offsetof(CUlaunchConfig, hStream),
                offsetof(CUlaunchConfig, attrs), offsetof(CUlaunchConfig, numAttrs),
                (int)CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION);
    return 0;
}
"""


def ctypes_layout() -> list[int]:
    """What :data:`LAYOUT_PROBE` prints, computed from the ctypes structs above."""
    return [ctypes.sizeof(LaunchAttribute), LaunchAttribute.value.offset,
            ctypes.sizeof(AttributeValue), ctypes.sizeof(LaunchConfig),
            LaunchConfig.hStream.offset, LaunchConfig.attrs.offset, LaunchConfig.numAttrs.offset,
            CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION]


def header_layout() -> list[int]:
    """The same figures from cuda.h, by a host program nvcc builds and this machine runs."""
    nvcc = build.require_nvcc()
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = Path(tmp) / "layout.cpp", Path(tmp) / "layout"
        src.write_text(LAYOUT_PROBE)
        subprocess.run([nvcc, "-o", str(exe), str(src)], check=True, capture_output=True)
        out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    return [int(v) for v in out.split()]


def source() -> str:
    return KERNEL_FILE.read_text()


class Module:
    """lab/kernels/v7_pdl.cu built for this GPU and loaded through the driver in the current
    context (PyCUDA keeps its CUfunctions to itself), with cuLaunchKernelEx."""

    def __init__(self):
        gpu.require()
        self.cu = libcuda.get()
        self.facts = gpu.facts()
        binary = build.compile_source(source(), self.facts.arch, "cubin", name="v7_pdl",
                                      defines=v7_fast.DEFINES).binary
        self._image = ctypes.create_string_buffer(binary)
        self.handle = ctypes.c_void_p()
        self.cu.call("cuModuleLoadData", ctypes.byref(self.handle),
                     ctypes.cast(self._image, ctypes.c_void_p))
        self.launch_ex = self.cu.lib.cuLaunchKernelEx
        self.launch_ex.argtypes = [ctypes.POINTER(LaunchConfig), ctypes.c_void_p,
                                   ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p]
        self.launch_ex.restype = ctypes.c_int
        self._functions: dict[str, ctypes.c_void_p] = {}

    def function(self, name: str, dynamic_shared: int) -> ctypes.c_void_p:
        fn = self._functions.get(name)
        if fn is None:
            fn = ctypes.c_void_p()
            self.cu.call("cuModuleGetFunction", ctypes.byref(fn), self.handle, name.encode())
            static = ctypes.c_int()
            self.cu.call("cuFuncGetAttribute", ctypes.byref(static),
                         libcuda.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, fn)
            # as the package's launcher does: opt in to the device's whole limit once
            self.cu.call("cuFuncSetAttribute", fn,
                         libcuda.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                         self.facts.shared_memory_per_block_optin - static.value)
            self._functions[name] = fn
        return fn


class Prepared:
    """One call (a v7 plan's two launches) for one buffer set, ready for cuLaunchKernelEx: the
    configs, attributes and argument arrays are built once, so a launch costs two driver calls."""

    def __init__(self, module: Module, plan, tensors: launch.Tensors, partials: int, stream,
                 spelling: str):
        self.module, self.launches, self._keep = module, [], []
        for k, step in enumerate(plan):
            name = step.kernel if spelling == "ctypes" else PDL_KERNELS[step.kernel]
            pdl = spelling == "pdl2" or (spelling == "pdl" and k == 1)
            values = []
            for _, value in step.args:
                if isinstance(value, Tensor):
                    values.append(ctypes.c_uint64(getattr(tensors, value.name)))
                elif isinstance(value, Scratch):
                    values.append(ctypes.c_uint64(partials))
                else:
                    values.append(ctypes.c_int(value))
            params = (ctypes.c_void_p * len(values))(
                *[ctypes.cast(ctypes.byref(v), ctypes.c_void_p) for v in values])
            attrs = (LaunchAttribute * 1)()
            attrs[0].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
            attrs[0].value.as_int = 1
            config = LaunchConfig(step.grid, 1, 1, step.block, 1, 1, step.shared,
                                  ctypes.c_void_p(stream.handle), attrs, 1 if pdl else 0)
            self._keep += [values, params, attrs]
            self.launches.append((config, module.function(name, step.shared), params))

    def __call__(self) -> None:
        for config, fn, params in self.launches:
            self.module.cu.check(self.module.launch_ex(ctypes.byref(config), fn, params, None),
                                 "cuLaunchKernelEx")


def wrapped(plan) -> bool:
    """Whether every kernel of ``plan`` has a PDL entry point (the cluster path has none)."""
    return all(step.kernel in PDL_KERNELS for step in plan)


class Calls:
    """Every spelling of v7 at (N, C) and one mode on ``problem``'s buffer sets, on ``stream``:
    ``calls[spelling](i)`` enqueues one call on set i."""

    def __init__(self, module: Module, problem: bench.DeviceProblem, N: int, C: int,
                 overwrite: bool, stream):
        drv = gpu.driver()
        self.shipped = launch.launcher("v7_fast", C, overwrite=overwrite)
        plan = self.shipped.plan(N)
        if not wrapped(plan):
            raise ValueError(f"{plan.path} path at C={C}: no PDL entry point")
        parts = plan[1].args[2][1]  # reduce_dweight_v7(dweight, partials, parts, C, slices)
        self.partials = drv.mem_alloc(parts * C * 4)
        self.partials_bytes = parts * C * 4
        self.prepared = {s: [Prepared(module, plan, t, int(self.partials), stream, s)
                             for t in problem.buffers] for s in SPELLINGS[1:]}
        self.problem, self.N, self.stream = problem, N, stream

    def __getitem__(self, spelling: str):
        if spelling == "shipped":
            return lambda i: self.shipped(self.N, self.problem.buffers[i], self.stream)
        return lambda i: self.prepared[spelling][i]()

    def poison_partials(self) -> None:
        """NaN in every partial: a final sum that read one the main kernel did not write fails."""
        gpu.driver().memset_d32(int(self.partials), 0x7FC00000, self.partials_bytes // 4)

    def free(self) -> None:
        self.partials.free()


def outputs(problem: bench.DeviceProblem, i: int = 0):
    """(dinp, dweight) of buffer set i, read back."""
    drv, p = gpu.driver(), problem.host
    dinp, dweight = np.empty_like(bf16.bits(p["dinp"])), np.empty_like(bf16.bits(p["dweight"]))
    drv.memcpy_dtoh(dinp, problem.buffers[i].dinp)
    drv.memcpy_dtoh(dweight, problem.buffers[i].dweight)
    return dinp.view(bf16.bfloat16), dweight.view(bf16.bfloat16)


def restore(problem: bench.DeviceProblem, i: int = 0) -> None:
    """dinp and dweight of set i back to the problem's (non-zero) starting values."""
    drv, p = gpu.driver(), problem.host
    drv.memcpy_htod(problem.buffers[i].dinp, bf16.bits(p["dinp"]))
    drv.memcpy_htod(problem.buffers[i].dweight, bf16.bits(p["dweight"]))


def check(shapes=CHECK_SHAPES) -> int:
    """Each spelling at each shape in both modes: against float64, and bitwise against shipped."""
    module, stream, failed = Module(), gpu.driver().Stream(), 0
    for N, C in shapes:
        for overwrite in (False, True):
            problem = bench.DeviceProblem(N, C, bf16.bfloat16, sets=1, seed=N * 7 + C)
            try:
                calls = Calls(module, problem, N, C, overwrite, stream)
            except ValueError as exc:
                print(f"skip {N}x{C}: {exc}")
                problem.free()
                continue
            try:
                got = {}
                for spelling in SPELLINGS:
                    restore(problem)
                    calls.poison_partials()
                    calls[spelling](0)
                    stream.synchronize()
                    got[spelling] = outputs(problem)
                for spelling in SPELLINGS:
                    report = v7lab.against_reference(got[spelling], problem.host, overwrite, spelling)
                    same = v7lab.same_bits(got[spelling], got["shipped"])
                    ok = report.ok and same
                    failed += not ok
                    print(v7lab.line(f"{spelling}{' (dinp=)' if overwrite else ''}", report,
                                     "" if same else "NOT BITWISE THE SHIPPED RESULT"), flush=True)
            finally:
                calls.free()
                problem.free()
    print(f"{failed} failed")
    return failed


def bench_shape(module: Module, N: int, C: int, overwrite: bool, copy_gbps: float,
                repeats: int) -> dict:
    """The spellings and the same-bytes ceiling interleaved at one shape and mode: ms and % of
    the ceiling each, and what each spelling saves against shipped, in us."""
    stream = gpu.driver().Stream()
    problem = bench.DeviceProblem(N, C, bf16.bfloat16)
    calls = Calls(module, problem, N, C, overwrite, stream)
    try:
        ceiling = bench._stream_launcher(accumulate=not overwrite, stream=stream)
        b = problem.buffers
        timed = {s: calls[s] for s in SPELLINGS}
        timed["ceiling"] = lambda i: ceiling(b[i].dinp, b[i].dout, b[i].inp, N * C)
        times = timing.time_interleaved(timed, sets=problem.sets, repeats=repeats, stream=stream)
    finally:
        calls.free()
        problem.free()
    ms = {name: statistics.median(t) for name, t in times.items()}
    nbytes = v7_fast.RUNG.bytes_moved(N, C, overwrite=overwrite)
    return dict(N=N, C=C, overwrite=overwrite, ms=ms,
                pct_of_ceiling={s: 100 * ms["ceiling"] / ms[s] for s in SPELLINGS},
                pct_of_copy={s: 100 * nbytes / (ms[s] * 1e-3) / 1e9 / copy_gbps
                             for s in [*SPELLINGS, "ceiling"]},
                saved_us={s: 1e3 * (ms["shipped"] - ms[s]) for s in SPELLINGS[1:]})


def run_bench(shapes, repeats: int, json_path: str) -> None:
    module = Module()
    yardstick = bench.copy_yardstick()
    print(f"{module.facts.name}; {yardstick}")
    print(f"{'shape':<12} {'mode':<4} " + " ".join(f"{s:>8}" for s in SPELLINGS)
          + "  (% of the ceiling)  saved us: " + " ".join(SPELLINGS[1:]))
    rows = []
    for N, C in shapes:
        for overwrite in (False, True):
            try:
                r = bench_shape(module, N, C, overwrite, yardstick.gbps, repeats)
            except ValueError as exc:
                print(f"skip {N}x{C}: {exc}")
                continue
            rows.append(r)
            print(f"{f'{N}x{C}':<12} {'ow' if overwrite else 'acc':<4} "
                  + " ".join(f"{r['pct_of_ceiling'][s]:8.1f}" for s in SPELLINGS)
                  + "  " + " ".join(f"{r['saved_us'][s]:6.2f}" for s in SPELLINGS[1:]),
                  flush=True)
    if json_path:
        Path(json_path).write_text(json.dumps(dict(device=module.facts.name,
                                                   copy_gbps=yardstick.gbps, rows=rows),
                                              indent=1))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=("layout", "check", "bench"))
    p.add_argument("--shapes", default="", help=f"NxC,... (bench default {BENCH_SHAPES})")
    p.add_argument("--repeats", type=int, default=30)
    p.add_argument("--json", default="")
    args = p.parse_args(argv)
    if args.what == "layout":
        mine, header = ctypes_layout(), header_layout()
        print(f"ctypes {mine}\ncuda.h {header}")
        return int(mine != header)
    if args.what == "check":
        shapes = CHECK_SHAPES if not args.shapes else [
            tuple(map(int, s.split("x"))) for s in args.shapes.split(",")]
        return int(check(shapes) > 0)
    shapes = [tuple(map(int, s.split("x"))) for s in (args.shapes or BENCH_SHAPES).split(",")]
    if args.repeats < 1:
        p.error(f"--repeats must be at least 1, got {args.repeats}")
    run_bench(shapes, args.repeats, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
