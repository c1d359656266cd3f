"""The ladder of versions, their launch configurations, input checks and ``run``.

Everything about how a version is launched lives in this file: the grid, the block, the dynamic shared
memory, the scratch buffers and the order of its kernels. ``run`` checks every input before anything
touches the GPU and raises ``ValueError``/``TypeError`` naming the argument and the rule.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from . import build
from .bf16 import bfloat16

FP32 = np.dtype(np.float32)
BF16 = bfloat16
DEFAULT_SMEM_LIMIT = 48 * 1024  # what a launch may use without opting in


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class Version:
    name: str
    adds: str  # what this rung adds over the one below it
    dtype: np.dtype  # storage type of dout, inp, weight, dinp, dweight (rstd is always float32)
    c_multiple: int  # C must be a multiple of this (8 for 128-bit loads of bf16)
    deterministic: bool  # bitwise-identical outputs on every run
    block_size: int  # default threads per block
    dynamic_smem: Callable[[int, int], int]  # (C, block_size) -> bytes of dynamic shared memory
    plan: Callable  # (launcher, buffers, stream) -> enqueues the kernels
    kernels: tuple[str, ...]  # entry points in kernels/<name>.cu
    overwrite_mode: bool = False  # supports dinp = (instead of +=)

    @property
    def file(self):
        return build.kernel_path(self.name)

    def bytes_moved(self, N: int, C: int, overwrite: bool = False) -> int:
        """The fewest bytes this version must move through device memory for one call."""
        item = self.dtype.itemsize
        per_row_tensors = 3 if overwrite else 4  # dout, inp, (dinp read), dinp write
        return per_row_tensors * N * C * item + N * 4 + 3 * C * item  # + rstd, weight, dweight r/w


# ----------------------------------------------------------------------------------------------------
# launch plans: one function per version, reading the launcher's shape, block size and scratch


def _plan_v1(L, b, stream):
    L.call("rmsnorm_backward_v1", (ceil_div(L.N, L.block_size),), stream,
           b.dinp, b.dweight, b.dout, b.inp, b.weight, b.rstd, L.N, L.C)


def _plan_v2(L, b, stream):
    warps = L.block_size // 32
    L.call("rmsnorm_backward_v2", (ceil_div(L.N, warps),), stream,
           b.dinp, b.dweight, b.dout, b.inp, b.weight, b.rstd, L.N, L.C)


def _persistent_grid(L, per_sm: int) -> int:
    # never more blocks than there are rows for their warps
    return max(1, min(L.multiprocessors * per_sm, ceil_div(L.N, L.block_size // 32)))


def _plan_v3(L, b, stream):
    L.call("rmsnorm_backward_v3", (_persistent_grid(L, 4),), stream,
           b.dinp, b.dweight, b.dout, b.inp, b.weight, b.rstd, L.N, L.C)


def _plan_v4(L, b, stream):
    accum = L.scratch("dweight_accum", L.C * 4)
    L.memset32(accum, L.C, stream)
    L.call("rmsnorm_backward_v4", (_persistent_grid(L, 4),), stream,
           b.dinp, accum, b.dout, b.inp, b.weight, b.rstd, L.N, L.C)
    L.call("add_dweight_v4", (ceil_div(L.C, 256),), stream, b.dweight, accum, L.C, block=256)


def _plan_v5(L, b, stream):
    grid = _persistent_grid(L, 2)
    partials = L.scratch("partials", grid * L.C * 4)
    L.call("rmsnorm_backward_v5", (grid,), stream,
           b.dinp, partials, b.dout, b.inp, b.weight, b.rstd, L.N, L.C)
    L.call("reduce_dweight_v5", (ceil_div(L.C, 256),), stream, b.dweight, partials, grid, L.C, block=256)


def _plan_v6(L, b, stream):
    grid = 2 * L.multiprocessors  # the seed's: two 512-thread blocks per SM
    # 32 floats for the ticket counter (one cache line), then 2*C floats per block as in the seed;
    # zeroed once here: the kernel leaves the counter at zero when it finishes
    scratch = L.scratch("scratch", (32 + 2 * L.C * grid) * 4, zero=True)
    L.call("rmsnorm_backward_v6", (grid,), stream,
           b.dinp, b.dweight, scratch, b.dout, b.inp, b.weight, b.rstd, L.N, L.C)


# v7_fast (kernels/v7_fast.cu): each thread holds K 16-byte chunks of a row, a row group of G threads
# holds the whole row (G * K * 8 >= C), several row groups per block, a persistent grid.
V7_MAX_BLOCK = 512  # the kernel's __launch_bounds__(512, 1)
V7_MAX_K = 4  # K = 4 takes the 128 registers a thread may have at 512 threads per SM
V7_MAX_C = 8 * V7_MAX_K * V7_MAX_BLOCK  # 16384: a row must fit in one block's registers
V7_REGISTERS = 128  # per thread (ptxas, sm_90): 65536 // (128 * block) blocks fit on an SM
V7_TOO_LARGE = 1 << 31  # v7's "shared memory" beyond V7_MAX_C: more than any device, so C is refused
V7_COLUMNS_PER_PASS = 128  # the final sum: one warp reads 32 float4 of a partial row per pass
#: for experiments (tools/v7_gpu.py, tools/v7_explore.py): {"K": 1..4, "per_sm": blocks per SM, "reduce": "fused"
#: or "kernel", "prefetch": 0 or 1}; the environment (RMSNORM_V7_K, _PER_SM, _REDUCE, _PREFETCH) is read first. Set it
#: before a Launcher is made: the launcher keeps what it found.
V7_TUNING: dict = {}
V7_PREFETCH_C = (1024, 8192)  # accumulate mode prefetches the next row (K = 2) for C in this range


@dataclass(frozen=True)
class V7Shape:
    K: int  # 16-byte chunks (8 channels) per thread
    group: int  # threads per row group, a multiple of 32
    groups: int  # row groups per block
    block: int  # threads per block = groups * group
    smem: int  # dynamic shared memory: the groups' dweight (C floats each) or the final sum's staging
    prefetch: bool = False  # the next row's dout and inp in registers while this row is finished (K = 2)


@dataclass(frozen=True)
class V7Config:
    shape: V7Shape
    per_sm: int  # blocks per SM
    grid: int  # blocks = partial rows
    reduce: str  # "fused" (the last blocks to finish sum the partials) or "kernel" (a second kernel does)
    reducers: int  # blocks that sum the partials, one slice of the columns each


def _v7_tuning() -> dict:
    import os

    found = {}
    for key in ("K", "per_sm", "reduce", "prefetch"):
        value = os.environ.get("RMSNORM_V7_" + key.upper())
        if value:
            found[key] = value if key == "reduce" else int(value)
    found.update(V7_TUNING)
    return found


def v7_shape(C: int, block: int = V7_MAX_BLOCK, K: int | None = None, overwrite: bool = False,
             prefetch: bool | None = None) -> V7Shape:
    """The row group v7_fast uses at this C and mode.

    K (chunks per thread) comes from ``K``, else the tuning, else C; ``prefetch`` likewise (it needs K = 2).
    By default accumulate mode prefetches for C in :data:`V7_PREFETCH_C` (K = 2), and otherwise a row is
    one warp while 4 chunks a lane cover it, else 4 chunks a thread. The block is at most ``block``.
    """
    chunks = C // 8
    block = min(int(block), V7_MAX_BLOCK) // 32 * 32
    tuning = _v7_tuning()
    if K is None:
        K = tuning.get("K")
    if prefetch is None:
        prefetch = tuning.get("prefetch")
    if prefetch is None:  # measured (kernels/NOTES.md): helps accumulate mode at these C, not overwrite mode
        prefetch = K is None and not overwrite and V7_PREFETCH_C[0] <= C <= V7_PREFETCH_C[1]
    prefetch = bool(prefetch)
    if K is None:
        K = 2 if prefetch else min(V7_MAX_K, max(1, ceil_div(chunks, 32)))
    K = int(K)
    if not 1 <= K <= V7_MAX_K:
        raise ValueError(f"v7_fast: K (chunks per thread) must be 1..{V7_MAX_K}, got {K}")
    if prefetch and K != 2:
        raise ValueError(f"v7_fast: prefetch needs K = 2 (two rows in 128 registers), got K={K}")
    group = 32 * max(1, ceil_div(chunks, 32 * K))
    if group > block:
        raise ValueError(f"v7_fast keeps a row in one block's registers: at C={C} with K={K} a row needs "
                         f"{group} threads, more than a block of {block}; the largest C is {8 * K * block}")
    groups = block // group
    if group > 32:
        groups = min(groups, 15)  # one named barrier (1..15) per row group
    return V7Shape(K, group, groups, groups * group, max(groups * C * 4, groups * group * 16), prefetch)


def _smem_v7(C, block):
    # enough for either mode (a launcher's shared memory is fixed before it knows which it will run)
    try:
        return max(v7_shape(C, block, overwrite=mode).smem for mode in (False, True))
    except ValueError:
        return V7_TOO_LARGE


def _v7_config(L) -> V7Config:
    """Resolve the launch once per launcher (it keeps the result) from C, N, the mode, the block and the tuning."""
    cfg = getattr(L, "_v7", None)
    if cfg is not None:
        return cfg
    tuning = _v7_tuning()
    shape = v7_shape(L.C, L.block_size, tuning.get("K"), L.overwrite, tuning.get("prefetch"))
    if shape.smem > L.smem:
        raise RuntimeError(f"v7_fast: the tuning changed after this launcher was made ({shape.smem} bytes of "
                           f"shared memory wanted, {L.smem} prepared); make a new Launcher")
    fits = max(1, 65536 // (V7_REGISTERS * shape.block))
    per_sm = max(1, min(fits, int(tuning.get("per_sm") or fits)))
    grid = max(1, min(L.multiprocessors * per_sm, ceil_div(L.N, shape.groups)))
    reduce = tuning.get("reduce", "fused")
    if reduce not in ("fused", "kernel"):
        raise ValueError(f"v7_fast: reduce must be 'fused' or 'kernel', got {reduce!r}")
    passes = ceil_div(L.C, V7_COLUMNS_PER_PASS)
    # waiting blocks must leave room for the ones not yet started: at most half the grid waits
    reducers = min(passes, max(1, grid // 2)) if reduce == "fused" else passes
    cfg = V7Config(shape, per_sm, grid, reduce, reducers)
    L._v7 = cfg
    return cfg


def _plan_v7(L, b, stream):
    cfg = _v7_config(L)
    s = cfg.shape
    # 32 floats for the ticket counter (zeroed once; every launch leaves it at zero), then C fp32
    # partials per block
    scratch = L.scratch("scratch", (32 + cfg.grid * L.C) * 4, zero=True)
    fused = cfg.reduce == "fused"
    L.call("rmsnorm_backward_v7", (cfg.grid,), stream, b.dinp, b.dweight, scratch, b.dout, b.inp, b.weight,
           b.rstd, L.N, L.C, s.group, s.K, int(s.prefetch), int(L.overwrite), cfg.reducers if fused else 0,
           block=s.block)
    if cfg.reduce == "kernel":  # the same slices and the same order of every sum, in a kernel of their own
        L.call("reduce_dweight_v7", (cfg.reducers,), stream, b.dweight, scratch, cfg.grid, L.C, cfg.reducers,
               block=s.block)


def _smem_v3(C, block):
    return C * 4


def _smem_v5(C, block):
    # dweight of the block (C rounded to 256) + staging for warps 1.. of 4 floats per lane
    return (ceil_div(C, 256) * 256 + (block - 32) * 4) * 4


def _smem_v6(C, block):
    # the seed's formula, twice what RMSNorm needs (a leftover of layernorm's dbias)
    return (2 * ceil_div(C, 256) * 256 + 2 * (block - 32) * 4) * 4


VERSION_LIST = [
    Version("v1_naive", "one thread per row, two loops over C, dweight by global atomicAdd", FP32, 1, False,
            256, lambda C, b: 0, _plan_v1, ("rmsnorm_backward_v1",)),
    Version("v2_warp", "one warp per row: coalesced loads, __shfl_xor_sync butterfly", FP32, 1, False,
            256, lambda C, b: 0, _plan_v2, ("rmsnorm_backward_v2",)),
    Version("v3_smem", "dweight summed per block in shared memory, one global atomic per block and channel",
            FP32, 1, False, 256, _smem_v3, _plan_v3, ("rmsnorm_backward_v3",)),
    Version("v4_vec_bf16", "bf16 storage, fp32 math, 128-bit Packed128 loads/stores, cache hints", BF16, 8,
            False, 256, _smem_v3, _plan_v4, ("rmsnorm_backward_v4", "add_dweight_v4")),
    Version("v5_two_pass", "deterministic: per-block partials to scratch, a second kernel sums them", BF16, 8,
            True, 512, _smem_v5, _plan_v5, ("rmsnorm_backward_v5", "reduce_dweight_v5")),
    Version("v6_last_block", "the seed's kernel10: one kernel, atomicInc ticket, the last block sums", BF16,
            8, True, 512, _smem_v6, _plan_v6, ("rmsnorm_backward_v6",)),
    Version("v7_fast", "past the seed: a row per row group in registers, no barrier per chunk, the final "
            "sum spread over many blocks, an overwrite mode", BF16, 8, True, 512, _smem_v7, _plan_v7,
            ("rmsnorm_backward_v7", "reduce_dweight_v7"), overwrite_mode=True),
]
VERSIONS = tuple(v.name for v in VERSION_LIST)
_BY_NAME = {v.name: v for v in VERSION_LIST}


def register(version: Version) -> None:
    """Add a version to the ladder (used by later lessons and by experiments)."""
    global VERSIONS
    _BY_NAME[version.name] = version
    if version.name not in VERSIONS:
        VERSION_LIST.append(version)
        VERSIONS = tuple(v.name for v in VERSION_LIST)


def get(version) -> Version:
    if isinstance(version, Version):
        return version
    try:
        return _BY_NAME[version]
    except KeyError:
        raise ValueError(f"version must be one of {', '.join(VERSIONS)}; got {version!r}") from None


# ----------------------------------------------------------------------------------------------------
# input checks (no GPU needed)


@dataclass(frozen=True)
class Shape:
    N: int
    C: int
    shape: tuple  # the shape of inp as given: (N, C) or (B, T, C)


def _is_gpuarray(x) -> bool:
    return hasattr(x, "gpudata") and hasattr(x, "strides")


def _describe(x):
    return f"{type(x).__module__}.{type(x).__name__}"


def check_inputs(version, dout, inp, weight, rstd, dinp=None, dweight=None) -> Shape:
    """Check shapes, dtypes, memory layout and the version's C rule; return N and C.

    Raises ``TypeError`` (not an array, wrong dtype) or ``ValueError`` (shape, layout, C rule),
    always naming the argument and the rule it breaks.
    """
    spec = get(version)
    arrays = dict(dout=dout, inp=inp, weight=weight, rstd=rstd, dinp=dinp, dweight=dweight)
    for name, a in arrays.items():
        if a is None and name in ("dinp", "dweight"):
            continue
        if not (isinstance(a, np.ndarray) or _is_gpuarray(a)):
            raise TypeError(f"{name} must be a NumPy array or a PyCUDA GPUArray, got {_describe(a)}")
    given = [n for n, a in arrays.items() if a is not None]
    kinds = {n: _is_gpuarray(arrays[n]) for n in given}
    if len(set(kinds.values())) > 1:
        on_gpu = [n for n in given if kinds[n]]
        raise TypeError(f"arrays must all be NumPy or all GPUArrays; GPUArrays: {', '.join(on_gpu)}")

    if inp.ndim not in (2, 3):
        raise ValueError(f"inp must have 2 dims (N, C) or 3 dims (B, T, C), got shape {tuple(inp.shape)}")
    shape = tuple(int(s) for s in inp.shape)
    C = shape[-1]
    N = int(np.prod(shape[:-1]))
    expect = {"dout": shape, "dinp": shape, "weight": (C,), "rstd": shape[:-1], "dweight": (C,)}
    for name, want in expect.items():
        a = arrays[name]
        if a is not None and tuple(a.shape) != want:
            raise ValueError(f"{name} must have shape {want} to match inp {shape}, got {tuple(a.shape)}")

    for name in ("dout", "inp", "weight", "dinp", "dweight"):
        a = arrays[name]
        if a is not None and np.dtype(a.dtype) != spec.dtype:
            raise TypeError(f"{name} must be {spec.dtype.name} for {spec.name}, got {np.dtype(a.dtype).name}")
    if np.dtype(rstd.dtype) != FP32:
        raise TypeError(f"rstd must be float32 (the forward pass caches it in fp32), got {np.dtype(rstd.dtype).name}")

    for name in given:
        a = arrays[name]
        contiguous = a.flags.c_contiguous if isinstance(a, np.ndarray) else a.flags.c_contiguous
        if not contiguous:
            raise ValueError(f"{name} must be C-contiguous (rows stored one after another); "
                             f"use np.ascontiguousarray or a fresh GPUArray")
    if C < 1:
        raise ValueError(f"C (the last dim of inp) must be at least 1, got {C}")
    if C % spec.c_multiple:
        raise ValueError(f"{spec.name} needs C to be a multiple of {spec.c_multiple} (128-bit loads of "
                         f"{spec.c_multiple} values), got C={C}")
    if spec.c_multiple > 1:
        for name in given:
            a = arrays[name]
            if _is_gpuarray(a) and int(a.gpudata) % 16:
                raise ValueError(f"{name} must start on a 16-byte boundary for {spec.name}'s 128-bit loads "
                                 f"(its address ends in {int(a.gpudata) % 16:#x})")
    if N >= 2**31:
        raise ValueError(f"N (rows) must be below 2**31 (kernels take it as int), got {N}")
    # a C the version cannot run on any device (this device's limit is checked where the launcher knows it)
    check_shared_memory(spec, C, 2**31 - 1)
    return Shape(N, C, shape)


def check_shared_memory(version, C: int, limit: int, block_size: int | None = None) -> int:
    """Raise ``ValueError`` when ``version`` at this C needs more shared memory than ``limit``.

    A version reports 2**31 bytes or more for a C it cannot run for another reason (v7_fast keeps a row
    in one block's registers); the message then says that C is beyond the version, not the device.
    """
    spec = get(version)
    block = block_size or spec.block_size
    need = spec.dynamic_smem(C, block)
    if need > limit:
        # the largest C below 2**18 channels that fits (found by a scan: the need may not grow with C)
        top = (1 << 18) // spec.c_multiple * spec.c_multiple
        largest = next((c for c in range(top, 0, -spec.c_multiple) if spec.dynamic_smem(c, block) <= limit), 0)
        if need >= 2**31:
            raise ValueError(f"C={C} is more than {spec.name} can run on any device; the largest C it can run "
                             f"is {largest}")
        raise ValueError(f"C={C} needs {need} bytes of shared memory per block for {spec.name}, more than "
                         f"this device allows ({limit} bytes); the largest C it can run is {largest}")
    return need


# ----------------------------------------------------------------------------------------------------
# launching


class LaunchError(RuntimeError):
    """A CUDA error raised by a version's launch, with the version's name in front."""


@dataclass
class Buffers:
    """Device addresses of one call's tensors."""

    dinp: int
    dweight: int
    dout: int
    inp: int
    weight: int
    rstd: int

    def __post_init__(self):
        for name in ("dinp", "dweight", "dout", "inp", "weight", "rstd"):
            setattr(self, name, np.uintp(int(getattr(self, name))))


class Launcher:
    """One version, compiled and configured for one (N, C) on this device, with its own scratch.

    ``launcher(buffers, stream)`` enqueues the version's kernels; nothing is synchronised. Two launchers
    have separate scratch buffers, so they may run on two streams at once.
    """

    def __init__(self, version, N: int, C: int, block_size: int | None = None, overwrite: bool = False):
        from . import gpu

        self.spec = get(version)
        if overwrite and not self.spec.overwrite_mode:
            raise ValueError(f"overwrite=True (dinp = instead of +=) is not offered by {self.spec.name}")
        self.overwrite = bool(overwrite)
        self.N, self.C = int(N), int(C)
        self.block_size = int(block_size or self.spec.block_size)
        if self.block_size % 32 or not 32 <= self.block_size <= 1024:
            raise ValueError(f"block_size must be a multiple of 32 between 32 and 1024, got {self.block_size}")
        facts = gpu.facts()
        self.multiprocessors = facts.multiprocessors
        self.drv = gpu.driver()
        self.smem = check_shared_memory(self.spec, self.C, facts.shared_memory_per_block_optin, self.block_size)
        module = build.source_module(self.spec.name)
        self.functions = {name: module.get_function(name) for name in self.spec.kernels}
        main = self.functions[self.spec.kernels[0]]
        static = main.get_attribute(self.drv.function_attribute.SHARED_SIZE_BYTES)
        if static + self.smem > DEFAULT_SMEM_LIMIT:
            # opt in: above 48 KiB a launch fails unless asked for. The attribute belongs to the compiled
            # function, which launchers of every C share, so ask for the device's whole limit once:
            # setting it to this launcher's need would break a launcher that needs more.
            main.set_attribute(self.drv.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES,
                               facts.shared_memory_per_block_optin - static)
        self._scratch: dict[str, object] = {}

    def scratch(self, name: str, nbytes: int, zero: bool = False):
        """A device buffer owned by this launcher, allocated on first use (zeroed once if asked)."""
        buf = self._scratch.get(name)
        if buf is None:
            buf = self.drv.mem_alloc(max(nbytes, 16))
            if zero:
                self.drv.memset_d8(buf, 0, max(nbytes, 16))
            self._scratch[name] = buf
        return buf

    def memset32(self, ptr, count: int, stream=None):
        self.drv.memset_d32_async(ptr, 0, count, stream)

    def call(self, kernel: str, grid: tuple, stream, *args, block: int | None = None):
        fn = self.functions[kernel]
        # Python ints are the kernels' int parameters (N, C); everything else is a device pointer
        packed = [a if isinstance(a, np.generic) else np.int32(a) if isinstance(a, int) else np.uintp(int(a))
                  for a in args]
        shared = self.smem if kernel == self.spec.kernels[0] else 0
        try:
            fn(*packed, block=(block or self.block_size, 1, 1), grid=(int(grid[0]), 1, 1), shared=shared,
               stream=stream)
        except self.drv.Error as exc:
            raise LaunchError(f"{self.spec.name}: launching {kernel} failed: {exc}") from exc

    def __call__(self, buffers: Buffers, stream=None):
        if self.N == 0:
            return
        self.spec.plan(self, buffers, stream)


_launchers: dict = {}


def launcher(version, N: int, C: int, block_size: int | None = None, overwrite: bool = False) -> Launcher:
    """A cached :class:`Launcher` for this version and shape."""
    key = (get(version).name, N, C, block_size, overwrite)
    if key not in _launchers:
        _launchers[key] = Launcher(version, N, C, block_size, overwrite)
    return _launchers[key]


def _pointer(a) -> int:
    return int(a.gpudata) if _is_gpuarray(a) else int(a)


def run(version, dout, inp, weight, rstd, dinp=None, dweight=None, *, block_size: int | None = None,
        overwrite: bool = False):
    """Run one backward pass of ``version``: returns ``(dinp, dweight)`` with this call's gradients added.

    NumPy inputs: copied to the GPU, and new NumPy arrays are returned (``dinp``/``dweight`` default to
    zeros and are not modified). GPUArray inputs: ``dinp`` and ``dweight`` are required and updated in
    place, and returned. With ``overwrite`` (versions that offer it) dinp is set, not added to (dweight
    still accumulates). ``N == 0`` is a no-op that returns the outputs untouched. Every input is checked
    before the GPU is touched.
    """
    from . import gpu

    spec = get(version)
    if overwrite and not spec.overwrite_mode:
        raise ValueError(f"overwrite=True (dinp = instead of +=) is not offered by {spec.name}")
    shp = check_inputs(spec, dout, inp, weight, rstd, dinp, dweight)
    on_gpu = _is_gpuarray(inp)
    if on_gpu and (dinp is None or dweight is None):
        raise ValueError("dinp and dweight must be given as GPUArrays when the inputs are GPUArrays")
    if not on_gpu:
        dinp = np.zeros(shp.shape, spec.dtype) if dinp is None else np.array(dinp, copy=True)
        dweight = np.zeros(shp.C, spec.dtype) if dweight is None else np.array(dweight, copy=True)
    if shp.N == 0:
        return dinp, dweight

    gpu.require()
    L = launcher(spec, shp.N, shp.C, block_size, overwrite)
    drv = L.drv
    if on_gpu:
        L(Buffers(*(_pointer(a) for a in (dinp, dweight, dout, inp, weight, rstd))))
        _synchronize(spec)
        return dinp, dweight

    host = dict(dinp=dinp, dweight=dweight, dout=dout, inp=inp, weight=weight, rstd=rstd)
    device = {k: drv.mem_alloc(max(v.nbytes, 16)) for k, v in host.items()}
    try:
        for k, v in host.items():
            drv.memcpy_htod(device[k], np.ascontiguousarray(v))
        L(Buffers(**{k: int(p) for k, p in device.items()}))
        _synchronize(spec)
        drv.memcpy_dtoh(dinp, device["dinp"])
        drv.memcpy_dtoh(dweight, device["dweight"])
    finally:
        for p in device.values():
            p.free()
    return dinp, dweight


def _synchronize(spec: Version) -> None:
    from . import gpu

    try:
        gpu.synchronize()
    except gpu.driver().Error as exc:
        raise LaunchError(f"{spec.name}: the kernel failed: {exc}") from exc


def forward(inp, weight, eps: float = 1e-5):
    """RMSNorm forward on the GPU (fp32, one warp per row, ``kernels/rmsnorm_forward.cu``).

    Returns ``(out, rstd)`` as NumPy arrays; ``rstd`` is what the backward versions read.
    """
    from . import gpu

    x = np.asarray(inp)
    w = np.asarray(weight)
    if x.ndim not in (2, 3):
        raise ValueError(f"inp must have 2 dims (N, C) or 3 dims (B, T, C), got shape {x.shape}")
    if x.dtype != FP32 or w.dtype != FP32:
        raise TypeError(f"inp and weight must be float32, got {x.dtype.name} and {w.dtype.name}")
    C = x.shape[-1]
    if w.shape != (C,):
        raise ValueError(f"weight must have shape ({C},) to match inp's C, got {w.shape}")
    N = int(np.prod(x.shape[:-1]))
    out = np.empty_like(x)
    rstd = np.empty(x.shape[:-1], np.float32)
    if N == 0:
        return out, rstd
    gpu.require()
    drv = gpu.driver()
    fn = build.source_module("rmsnorm_forward").get_function("rmsnorm_forward")
    d_inp, d_w = drv.to_device(np.ascontiguousarray(x)), drv.to_device(w)
    d_out, d_rstd = drv.mem_alloc(out.nbytes), drv.mem_alloc(max(rstd.nbytes, 4))
    try:
        warps = 8
        fn(d_out, d_rstd, d_inp, d_w, np.int32(N), np.int32(C), np.float32(eps),
           block=(32 * warps, 1, 1), grid=(ceil_div(N, warps), 1, 1))
        try:
            gpu.synchronize()
        except drv.Error as exc:
            raise LaunchError(f"rmsnorm_forward: the kernel failed: {exc}") from exc
        drv.memcpy_dtoh(out, d_out)
        drv.memcpy_dtoh(rstd, d_rstd)
    finally:
        for a in (d_inp, d_w, d_out, d_rstd):
            a.free()
    return out, rstd
