"""Occupancy without a GPU: how many blocks of a kernel one SM holds at once, and what stops more.

An SM takes a block only when all of the block fits at once:

* **registers**: given to each warp in units of 256 (``registers/thread x 32``, rounded up); an SM
  is four quarters, each with a quarter of the 65536 registers, and a warp lives in one quarter;
* **shared memory**: static + dynamic + 1 KiB that the driver reserves per block (sm_80 and later),
  rounded up to 128 B, out of the SM's shared memory (its largest carveout by default);
* **warp slots** (64 warps per SM on sm_80, sm_90 and sm_100; 48 on sm_86, sm_89 and sm_120) and
  **block slots** (32 per SM; 16 on sm_86, 24 on sm_89 and sm_120).

The smallest of those numbers is the occupancy; the resource that gives it is the limiter. These are
the rules of NVIDIA's occupancy calculator for the default carveout. On a GPU,
:func:`driver_blocks_per_sm` asks the driver (``cuOccupancyMaxActiveBlocksPerMultiprocessor``) for
the same number, and
``tests/test_occupancy.py`` checks that both agree. :func:`report` is
:func:`rmsnorm_lessons.inspection.sass.report` followed by this arithmetic (``python -m
rmsnorm_lessons inspect`` prints it).
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass, field

from ..core import build, gpu, ladder, libcuda

# the table, read here too (notebooks and tests name occupancy.LIMITS)
from ..core.devices import (  # noqa: F401
    GPUS,
    KIB,
    LESSON_ARCHES,
    LIMITS,
    Limits,
    limits,
    target_facts,
)
from . import sass

DEFAULT_ARCH = build.DEFAULT_ARCH


def _round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit


@dataclass(frozen=True)
class Occupancy:
    """How many blocks of one kernel fit on one SM, and why not more."""

    kernel: str
    arch: str
    block_size: int
    registers: int  # per thread, from ptxas
    static_smem: int  # bytes, from ptxas
    dynamic_smem: int  # bytes, chosen at launch
    blocks_per_sm: int
    warps_per_sm: int
    max_warps_per_sm: int
    # "registers", "shared memory", "warps", "blocks", ... ("registers and warps" on a tie)
    limiter: str
    blocks_by: dict = field(default_factory=dict)  # resource -> blocks that resource alone allows
    registers_per_warp: int = 0  # allocated, after rounding
    smem_per_block: int = 0  # allocated: static + dynamic + reserved, rounded
    shared_per_sm: int = 0
    barriers: int = 0  # named barriers the kernel uses (ptxas)
    notes: tuple = ()

    @property
    def occupancy(self) -> float:
        """Resident warps over the SM's warp slots (0..1)."""
        return self.warps_per_sm / self.max_warps_per_sm

    @property
    def threads_per_sm(self) -> int:
        return self.blocks_per_sm * self.block_size

    def summary(self) -> str:
        return (f"occupancy ({self.arch}, block {self.block_size}): {self.blocks_per_sm} "
                f"block(s)/SM, {self.warps_per_sm} of {self.max_warps_per_sm} warps "
                f"({self.occupancy:.0%}), limited by {self.limiter}")

    def explain(self) -> str:
        """The arithmetic, one resource a line."""
        L = limits(self.arch)
        warps = -(-self.block_size // 32)
        lines = [self.summary()]
        b = self.blocks_by
        per_quarter = L.registers_per_sm // L.sub_partitions
        held = (per_quarter // self.registers_per_warp if self.registers_per_warp
                else "any number of")
        lines.append(
            f"  registers:     {self.registers}/thread x 32 = {self.registers * 32}/warp, "
            f"allocated {self.registers_per_warp} (units of {L.register_unit}); {per_quarter} per "
            f"SM quarter hold {held} warps; blocks of {warps} warps -> {_fmt(b.get('registers'))}")
        lines.append(
            f"  shared memory: {self.static_smem} static + {self.dynamic_smem} dynamic + "
            f"{L.reserved_shared_per_block} reserved = {self.smem_per_block} B per block (units of "
            f"{L.shared_unit}); {self.shared_per_sm} B per SM -> {_fmt(b.get('shared memory'))}")
        lines.append(f"  warps:         {L.max_warps_per_sm} per SM / {warps} per block -> "
                     f"{_fmt(b.get('warps'))}")
        lines.append(f"  blocks:        {L.max_blocks_per_sm} per SM -> {_fmt(b.get('blocks'))}")
        if "barriers" in b:
            slots = L.barrier_slots_per_block_slot * L.max_blocks_per_sm
            lines.append(f"  barriers:      {slots} per SM / {self.barriers} per block -> "
                         f"{_fmt(b['barriers'])}")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()


def _fmt(n) -> str:
    return "no limit" if n is None else f"{n} block(s)"


def from_resources(registers: int, static_smem: int, block_size: int, dynamic_smem: int = 0,
                   arch: str = DEFAULT_ARCH, *, kernel: str = "kernel", barriers: int = 0,
                   max_threads_per_block: int | None = None, opt_in: bool = True) -> Occupancy:
    """Occupancy of a kernel with these resources (the calculator's rules; no compiler, no GPU).

    ``opt_in``: the launch raises the kernel's dynamic shared memory limit above 48 KiB when it
    needs more (as the launcher, :mod:`rmsnorm_lessons.core.launch`, does).
    ``max_threads_per_block``: the kernel's
    ``__launch_bounds__``, if any.
    """
    L = limits(arch)
    if block_size < 1:
        raise ValueError(f"block_size must be at least 1, got {block_size}")
    warps = -(-block_size // 32)
    notes = []
    by: dict[str, int] = {}

    # registers: per warp, rounded to the allocation unit; warps fill the four SM quarters
    reg_warp = _round_up(registers * 32, L.register_unit)
    # the hardware's per-block check
    reg_block_check = reg_warp * _round_up(warps, L.sub_partitions)
    if registers > L.max_registers_per_thread or reg_block_check > L.registers_per_block:
        by["registers"] = 0
        notes.append(f"{registers} registers x {block_size} threads exceed the "
                     f"{L.registers_per_block} registers one block may have")
    elif reg_warp == 0:
        by["registers"] = None
    else:
        per_quarter = (L.registers_per_sm // L.sub_partitions) // reg_warp
        by["registers"] = per_quarter * L.sub_partitions // warps

    # shared memory: static + dynamic + reserved, rounded; the SM's largest carveout by default
    smem = _round_up(static_smem + dynamic_smem + L.reserved_shared_per_block, L.shared_unit)
    per_block_limit = (L.shared_per_block_optin if opt_in
                       else L.shared_per_block) + L.reserved_shared_per_block
    if smem > per_block_limit:
        by["shared memory"] = 0
        notes.append(f"{static_smem + dynamic_smem} B of shared memory is more than a block may "
                     f"use ({per_block_limit - L.reserved_shared_per_block} "
                     f"B{'' if opt_in else ' without opting in'})")
    else:  # a kernel with no shared memory at all (v1, v2 on sm_75) is not limited by it
        by["shared memory"] = L.shared_per_sm // smem if smem else None

    # warp and block slots
    by["warps"] = L.max_warps_per_sm // warps if block_size <= L.max_threads_per_block else 0
    if block_size > L.max_threads_per_block:
        notes.append(f"a block has at most {L.max_threads_per_block} threads")
    by["blocks"] = L.max_blocks_per_sm
    if max_threads_per_block is not None and block_size > max_threads_per_block:
        by["launch bounds"] = 0
        notes.append(f"__launch_bounds__ allows at most {max_threads_per_block} threads per block")
    if L.barrier_slots_per_block_slot and barriers > 0:
        by["barriers"] = L.barrier_slots_per_block_slot * L.max_blocks_per_sm // barriers

    finite = {k: v for k, v in by.items() if v is not None}
    blocks = min(finite.values())
    limiter = " and ".join(k for k, v in finite.items() if v == blocks)
    return Occupancy(kernel=kernel, arch=arch, block_size=block_size, registers=registers,
                     static_smem=static_smem, dynamic_smem=dynamic_smem, blocks_per_sm=blocks,
                     warps_per_sm=blocks * warps, max_warps_per_sm=L.max_warps_per_sm,
                     limiter=limiter,
                     blocks_by=by, registers_per_warp=reg_warp, smem_per_block=smem,
                     shared_per_sm=L.shared_per_sm, barriers=barriers, notes=tuple(notes))


# rows enough for every block of a persistent grid; the block and shared memory do not depend on N
_LARGE_N = 1 << 24


def device_like(arch: str):
    """This GPU's facts (else the saved H200's) as an ``arch`` GPU has them
    (:func:`rmsnorm_lessons.core.devices.target_facts`), so that a plan which sizes itself to the
    device (v7_fast's staged rows) is the one that GPU would get."""
    return target_facts(gpu.facts_or_fallback()[0], arch, name=f"an {arch} GPU")


def launch_shape(version, C: int, block_size: int | None = None, kernel: str | None = None,
                 device=None) -> tuple[str, int, int]:
    """``(kernel, threads per block, dynamic shared memory bytes)`` of one kernel of a version, read
    from the version's plan at (a large N, ``C``): the block and the shared memory its launch asks
    for.

    ``kernel`` defaults to the main kernel the plan launches at this C (its first launch: v7_fast
    has three, for short, staged and split rows); ``block_size`` is handed to the plan (it may
    launch fewer threads: v7_fast rounds a block down to whole row groups). A kernel the plan does
    not launch at that C gets ``block_size`` (else the version's) and no dynamic shared memory.
    """
    rung = ladder.get(version)
    if kernel is not None and kernel not in rung.kernels:
        raise ValueError(f"{rung.name} has the kernels {', '.join(rung.kernels)}; got {kernel!r}")
    launches = ladder.plan(rung, _LARGE_N, C, device, block_size=block_size)
    kernel = kernel or launches[0].kernel
    found = next((l for l in launches if l.kernel == kernel), None)
    if found is None:
        return kernel, int(block_size or rung.block_size), 0
    return kernel, int(found.block), int(found.shared)


def plan_blocks_per_sm(version, C: int, block_size: int | None = None, device=None) -> int | None:
    """Blocks per SM the version's plan launches for a large N
    (:func:`rmsnorm_lessons.core.ladder.blocks_per_sm`), or None where its grid grows with N (a
    block per few rows, as in v1 and v2: no fixed number per SM)."""
    device = device if device is not None else gpu.facts_or_fallback()[0]
    per_sm = ladder.blocks_per_sm(version, C, device, block_size=block_size)
    more = ladder.plan(version, 2 * _LARGE_N, C, device,
                       block_size=block_size)[0].grid / device.multiprocessors
    return int(per_sm) if more == per_sm and per_sm == int(per_sm) else None


def occupancy(version, C: int, arch: str = DEFAULT_ARCH, block_size: int | None = None, *,
              kernel: str | None = None, registers: int | None = None,
              opt_in: bool = True) -> Occupancy:
    """Occupancy of one kernel of ``version`` at width ``C`` on ``arch``, computed on the CPU.

    Registers and static shared memory come from ptxas (nvcc compiles the version for ``arch``), the
    block and the dynamic shared memory from the version's plan (:func:`launch_shape`).
    ``block_size`` defaults to the version's. ``registers`` overrides ptxas's figure, to ask "what
    if". ``kernel`` picks another kernel of the version (its main kernel, the first, by default).
    """
    rung = ladder.get(version)
    kernel, block, dynamic = launch_shape(rung, C, block_size, kernel, device=device_like(arch))
    res = build.resources(rung, arch)[kernel]
    bound = sass.max_threads_per_block(rung, kernel, arch)
    return from_resources(registers if registers is not None else res.registers, res.shared_bytes,
                          block,
                          dynamic, arch, kernel=kernel, barriers=res.barriers,
                          max_threads_per_block=bound,
                          opt_in=opt_in)


_HEADER = f"{'regs':>4} {'smem/block':>10} {'blocks/SM':>9} {'warps/SM':>8}  limiter"


def _row(label: str, arch: str, compute, with_block: bool = False) -> str:
    """``label`` and the columns under _HEADER for the occupancy ``compute()`` returns, or a line
    saying that nvcc cannot compile it for ``arch``."""
    try:
        o = compute()
    except build.CompileError as exc:
        return f"{label} cannot be compiled for {arch}: {exc.summary(keep=1)[:120]}"
    block = f" {o.block_size:>5}" if with_block else ""
    return (f"{label}{block} {o.registers:>4} {o.smem_per_block:>10} {o.blocks_per_sm:>9} "
            f"{o.warps_per_sm:>5}/{o.max_warps_per_sm:<2}  {o.limiter}")


def table(versions=None, C: int = 4096, arch: str = DEFAULT_ARCH) -> str:
    """One line per version: registers, shared memory, blocks and warps per SM, the limiter. A
    version that nvcc cannot compile for ``arch`` gets a line saying so (the rest of the table is
    still made)."""
    rows = [f"{'version':<15} {'block':>5} {_HEADER}"]
    for v in versions or ladder.VERSIONS:
        rows.append(_row(f"{ladder.get(v).name:<15}", arch, lambda: occupancy(v, C, arch),
                         with_block=True))
    return "\n".join(rows)


def across_archs(version, C: int = 4096, arches=LESSON_ARCHES,
                 block_size: int | None = None) -> str:
    """One line per architecture for one version at width ``C``: its GPUs, the registers ptxas gives
    that arch, shared memory per block, blocks and warps per SM and the limiter (no GPU needed). An
    arch that nvcc cannot compile the version for gets a line saying so instead of an error."""
    rung = ladder.get(version)
    rows = [f"{'arch':<7} {'GPUs':<23} {_HEADER}"]
    for arch in arches:
        rows.append(_row(f"{arch:<7} {GPUS.get(arch, ''):<23}", arch,
                         lambda: occupancy(rung, C, arch, block_size=block_size)))
    return "\n".join(rows)


def limits_text(arch: str) -> str:
    """What one SM of ``arch`` offers, from :data:`LIMITS`, in one line per resource."""
    L = limits(arch)
    return "\n".join([
        f"  warps per SM:         {L.max_warps_per_sm} ({L.max_threads_per_sm} threads)",
        f"  blocks per SM:        {L.max_blocks_per_sm}",
        f"  registers per SM:     {L.registers_per_sm} (at most {L.max_registers_per_thread} a "
        "thread)",
        f"  shared memory per SM: {L.shared_per_sm // KIB} KiB (a block: "
        f"{L.shared_per_block // KIB} KiB, {L.shared_per_block_optin // KIB} KiB after opting in; "
        f"{L.reserved_shared_per_block} B reserved a block)",
    ])


def device_limits_text() -> str:
    """This GPU's own limits, read from the driver (``cuDeviceGetAttribute``); without a GPU, the
    H200's (sm_90's row of :data:`LIMITS`), labelled as the fallback."""
    if not gpu.available():
        f, label = gpu.facts_or_fallback()
        return (f"{label}, {f.arch}, {f.multiprocessors} SMs (the sm_90 table, no driver asked):\n"
                + limits_text(f.arch))
    f, label = gpu.facts_or_fallback()
    try:
        d = device_limits()
    except Exception as exc:  # a driver without one of the attributes: the table, said so
        if f.arch.rstrip("a") not in LIMITS:
            return (f"{label}, {f.arch}: the driver's limits could not be read ({exc}) and there "
                    "is no table for it")
        return (f"{label}, {f.arch}, {f.multiprocessors} SMs (the {f.arch} table: the driver's "
                f"limits could not be read: {exc}):\n" + limits_text(f.arch))
    lines = [f"{label}, {f.arch}, {d['multiprocessor_count']} SMs (read from the driver):",
             f"  warps per SM:         {d['max_threads_per_multiprocessor'] // 32} "
             f"({d['max_threads_per_multiprocessor']} threads)",
             f"  blocks per SM:        {d['max_blocks_per_multiprocessor']}",
             f"  registers per SM:     {d['max_registers_per_multiprocessor']}",
             f"  shared memory per SM: {d['max_shared_memory_per_multiprocessor'] // KIB} KiB (a "
             f"block: {d['max_shared_memory_per_block'] // KIB} KiB, "
             f"{d['max_shared_memory_per_block_optin'] // KIB} KiB after opting in; "
             f"{d['reserved_shared_memory_per_block']} B reserved a block)"]
    if f.arch.rstrip("a") not in LIMITS:
        lines.append(f"  (no occupancy table for {f.arch} here: the tables below are computed for "
                     "the listed arches)")
    return "\n".join(lines)


def report(name, arch: str = DEFAULT_ARCH, C: int | None = 4096,
           block_size: int | None = None) -> str:
    """What ``python -m rmsnorm_lessons inspect`` prints, no GPU needed:
    :func:`rmsnorm_lessons.inspection.sass.report` (resources and instruction counts of every
    kernel) and, for a version at width ``C``, its main kernel's launch (block, dynamic shared
    memory, from the plan) and occupancy with the arithmetic (:meth:`Occupancy.explain`)."""
    target = sass.resolve(name)
    lines = [sass.report(target, arch)]
    if C is None or not isinstance(target, ladder.Rung):
        return lines[0]
    try:
        kernel, block, dynamic = launch_shape(target, C, block_size, device=device_like(arch))
    except ValueError as exc:  # a C or block the version cannot launch
        return "\n".join(lines + [f"launch at C={C}: {exc}"])
    lines.append(f"dynamic shared memory at C={C}: {dynamic} B (block of {block} threads)")
    try:
        lines.append(occupancy(target, C, arch=arch, block_size=block_size).explain())
    except ValueError as exc:  # an arch without a limits table
        lines.append(f"occupancy: {exc}")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------
# the driver's own answer (GPU only)

DEVICE_ATTRIBUTES = libcuda.DEVICE_ATTRIBUTES


@dataclass(frozen=True)
class DriverOccupancy:
    kernel: str
    block_size: int
    dynamic_smem: int
    blocks_per_sm: int
    registers: int  # what the driver sees in the loaded cubin
    static_smem: int


def device_limits() -> dict[str, int]:
    """The device's own figures for what :class:`Limits` tabulates (GPU)."""
    gpu.require()  # the primary context, current on this thread
    d = libcuda.get()
    return {name: d.device_attribute(name) for name in DEVICE_ATTRIBUTES}


def driver_blocks_per_sm(version, C: int, block_size: int | None = None, *,
                         kernel: str | None = None,
                         arch: str | None = None) -> DriverOccupancy:
    """The driver's ``cuOccupancyMaxActiveBlocksPerMultiprocessor`` for ``version`` at ``C`` (GPU
    only).

    The version is compiled with nvcc for the device's target (the flags and defines of every
    build), loaded with ``cuModuleLoadData``, given the opt-in shared memory limit where the launch
    needs more than the device's default, and asked, for the block and shared memory of
    :func:`launch_shape` (the same launch :func:`occupancy` computes).
    """
    rung = ladder.get(version)
    kernel, block, dynamic = launch_shape(rung, C, block_size, kernel)
    arch = arch or gpu.facts().arch
    gpu.require()  # the primary context, current on this thread
    d = libcuda.get()
    c = ctypes
    # a block's shared memory without opting in
    default_limit = d.device_attribute("max_shared_memory_per_block")
    image = c.create_string_buffer(build.compile_file(rung, arch).binary)
    module, function = c.c_void_p(), c.c_void_p()
    d.call("cuModuleLoadData", c.byref(module), c.cast(image, c.c_void_p))
    try:
        d.call("cuModuleGetFunction", c.byref(function), module, kernel.encode())
        regs, static = c.c_int(), c.c_int()
        d.call("cuFuncGetAttribute", c.byref(regs), libcuda.CU_FUNC_ATTRIBUTE_NUM_REGS, function)
        d.call("cuFuncGetAttribute", c.byref(static), libcuda.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,
               function)
        if static.value + dynamic > default_limit:  # the launch opts in above the default limit
            d.call("cuFuncSetAttribute", function,
                   libcuda.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                   dynamic)
        blocks = c.c_int()
        d.call("cuOccupancyMaxActiveBlocksPerMultiprocessor", c.byref(blocks), function, block,
               dynamic)
    finally:
        d.lib.cuModuleUnload(module)
    return DriverOccupancy(kernel, block, dynamic, blocks.value, regs.value, static.value)
