"""Executing plans: the one place that launches a rung's kernels.

A :class:`Launcher` holds one rung compiled for one C (with a block size, a mode and a config): its
functions, prepared once, and its scratch buffers. ``launcher(N, tensors, stream)`` asks the rung's
module for the plan at N (data: :class:`~rmsnorm_lessons.core.ladder.Launch`) and enqueues it.
Nothing is waited for here.

Memory stays bounded: scratch is kept per stream and grown when a larger N needs more (never one
buffer per N), launchers are cached up to :data:`CACHE_SIZE` and :func:`release` frees them all.
Threads: a launcher enqueues a plan while holding its lock, so two threads on one stream can never
interleave their kernels between a plan's first and second launch; calls on different streams get
different scratch.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import NamedTuple

import numpy as np

from . import build, gpu, ladder, validate
from .ladder import Launch, Scratch, Tensor

#: what a launch may use without opting in to more shared memory
DEFAULT_SMEM_LIMIT = 48 * 1024
CACHE_SIZE = 16  # launchers kept (each holds its compiled functions and scratch)
PLANS_KEPT = 8  # plans (one per N) a launcher keeps
STREAMS_KEPT = 8  # streams a launcher keeps scratch for


class LaunchError(RuntimeError):
    """A CUDA error raised by a version's launch, with the version's name in front."""


class Tensors(NamedTuple):
    """Device addresses of one call's tensors."""

    dinp: int
    dweight: int
    dout: int
    inp: int
    weight: int
    rstd: int


def _type_code(value) -> str:
    return "P" if isinstance(value, (Tensor, Scratch)) else "i"


class _ScratchSet:
    """The scratch buffers of one launcher on one stream."""

    def __init__(self):
        self.buffers: dict[str, tuple[object, int]] = {}  # name -> (allocation, bytes)

    def get(self, drv, spec: Scratch, stream, zeroed: set):
        """The buffer for ``spec``; a ``zero="each"`` buffer is zeroed the first time a call asks
        for it (``zeroed`` holds the names this call has zeroed already: v4's accumulator is read by
        its second kernel, so it must not be zeroed again in between)."""
        held = self.buffers.get(spec.name)
        if held is None or held[1] < spec.nbytes:
            if held is not None:
                _wait(stream)  # the old buffer may still be in use by work queued on this stream
                held[0].free()
            nbytes = max(spec.nbytes, 16)
            buf = drv.mem_alloc(nbytes)
            if spec.zero == "once":
                drv.memset_d8_async(buf, 0, nbytes, stream)
            held = (buf, nbytes)
            self.buffers[spec.name] = held
        if spec.zero == "each" and spec.name not in zeroed:
            drv.memset_d8_async(held[0], 0, spec.nbytes, stream)
            zeroed.add(spec.name)
        return held[0]

    def free(self):
        for buf, _ in self.buffers.values():
            buf.free()
        self.buffers = {}


def _wait(stream) -> None:
    if stream is None:
        gpu.synchronize()
    else:
        stream.synchronize()


class Launcher:
    """One rung compiled for one C, with its prepared functions and its scratch (per stream)."""

    def __init__(self, call: validate.Call):
        if not isinstance(call, validate.Call):
            raise TypeError("Launcher takes a validate.Call (launcher() makes one from a version "
                            f"and its options), got {type(call).__name__}")
        self.rung, self.C, self.config = call.rung, call.C, call.config
        self.block_size, self.overwrite = call.block, call.overwrite
        with gpu.in_context() as g:
            self.drv = g.driver
            # the target's limits (build.target_facts: RMSNORM_ARCH), this GPU's SM count
            self.device = build.target_facts()
            # the plan at one row says every kernel and its shared memory, which do not depend on N
            probe = self._plan_uncached(1)
            self.module = build.source_module(self.rung)
            self.functions = {}
            self._static: dict[str, int] = {}
            self._opted_in: set[str] = set()
            for launch in probe:
                self._function(launch)
        self._plans: OrderedDict = OrderedDict()
        self._scratch: OrderedDict = OrderedDict()  # stream handle -> _ScratchSet
        self._lock = threading.Lock()

    def _plan_uncached(self, N: int) -> list[Launch]:
        return self.rung.plan(N, self.C, self.device, block=self.block_size,
                              overwrite=self.overwrite, config=self.config)

    def plan(self, N: int) -> list[Launch]:
        """The launches of one call with N rows (kept for the last few N)."""
        found = self._plans.get(N)
        if found is None:
            found = self._plan_uncached(N)
            self._plans[N] = found
            if len(self._plans) > PLANS_KEPT:
                self._plans.popitem(last=False)
        return found

    def _function(self, launch: Launch):
        fn = self.functions.get(launch.kernel)
        if fn is None:
            if launch.kernel not in self.rung.kernels:
                raise ValueError(f"{self.rung.name}'s plan launches {launch.kernel!r}, which its "
                                 f"rung does not list in kernels={self.rung.kernels}")
            try:
                fn = self.module.get_function(launch.kernel)
            except self.drv.LogicError as exc:
                raise ValueError(f"{self.rung.name}: no entry point {launch.kernel!r} in its CUDA "
                                 f"(is it extern \"C\" __global__?)") from exc
            fn.prepare("".join(_type_code(v) for _, v in launch.args))
            self.functions[launch.kernel] = fn
            static = fn.get_attribute(self.drv.function_attribute.SHARED_SIZE_BYTES)
            self._static[launch.kernel] = static
        static = self._static[launch.kernel]
        limit = self.device.shared_memory_per_block_optin
        if static + launch.shared > limit:
            raise ValueError(self._too_much_shared_memory(launch, static, limit))
        if launch.kernel not in self._opted_in and static + launch.shared > DEFAULT_SMEM_LIMIT:
            # above 48 KiB a launch fails unless asked for; the attribute belongs to the compiled
            # function, which launchers of every C share, so ask for the device's whole limit once
            fn.set_attribute(self.drv.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES,
                             limit - static)
            self._opted_in.add(launch.kernel)
        return fn

    def _too_much_shared_memory(self, launch: Launch, static: int, limit: int) -> str:
        largest = largest_c(self.rung, limit - static, self.block_size)
        return (f"C={self.C} needs {launch.shared} bytes of dynamic shared memory per block for "
                f"{self.rung.name} (+ {static} static), more than this device allows ({limit} "
                f"bytes); the largest C it can run is {largest}")

    def _scratch_for(self, stream) -> _ScratchSet:
        key = None if stream is None else stream.handle
        found = self._scratch.get(key)
        if found is None:
            found = _ScratchSet()
            self._scratch[key] = (found, stream)
            while len(self._scratch) > STREAMS_KEPT:
                _, (old, old_stream) = self._scratch.popitem(last=False)
                _wait(old_stream)
                old.free()
            return found
        self._scratch.move_to_end(key)
        return found[0]

    def __call__(self, N: int, tensors: Tensors, stream=None) -> None:
        """Enqueue one call on ``stream`` (a PyCUDA Stream or None); returns at once."""
        if N == 0:
            return
        launches = self.plan(N)
        with gpu.in_context(), self._lock:
            scratch = self._scratch_for(stream)
            zeroed: set = set()
            for launch in launches:
                fn = self._function(launch)
                args = []
                for name, value in launch.args:
                    if isinstance(value, Tensor):
                        args.append(np.uintp(getattr(tensors, value.name)))
                    elif isinstance(value, Scratch):
                        args.append(np.uintp(int(scratch.get(self.drv, value, stream, zeroed))))
                    else:
                        args.append(np.int32(value))
                try:
                    fn.prepared_async_call((launch.grid, 1, 1), (launch.block, 1, 1), stream, *args,
                                           shared_size=launch.shared)
                except self.drv.Error as exc:
                    raise LaunchError(f"{self.rung.name}: launching {launch.kernel} failed: "
                                      f"{exc}") from exc

    def scratch(self, name: str, stream=None):
        """The device buffer called ``name`` that this launcher holds for ``stream`` (to look at
        what a kernel left there, e.g. v6's ticket counter); None before a call on that stream made
        it."""
        key = None if stream is None else stream.handle
        held = self._scratch.get(key)
        found = held[0].buffers.get(name) if held else None
        return found[0] if found else None

    def free(self) -> None:
        """Free this launcher's scratch (waiting for the streams that use it)."""
        with gpu.in_context(), self._lock:
            for scratch, stream in self._scratch.values():
                _wait(stream)
                scratch.free()
            self._scratch.clear()


def held_bytes() -> int:
    """Device memory the cached launchers hold between calls (their scratch, every stream): the only
    memory the package keeps after ``run`` returns."""
    with _cache_lock:
        launchers = list(_cache.values())
    return sum(n for L in launchers for scratch, _ in L._scratch.values()
               for _, n in scratch.buffers.values())


def largest_c(rung: ladder.Rung, budget: int, block: int) -> int:
    """The largest C (a multiple of the rung's) whose dynamic shared memory fits in ``budget``
    bytes."""
    lo, hi = 0, validate.MAX_C // rung.c_multiple  # in units of c_multiple; the need grows with C
    fits = lambda k: _need(rung, k * rung.c_multiple, block) <= budget  # noqa: E731
    if fits(hi):
        return hi * rung.c_multiple
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo * rung.c_multiple


def _need(rung, C, block) -> float:
    if C == 0:
        return 0
    try:
        return rung.shared_memory(C, block)
    except ValueError:  # a C the rung cannot run at all
        return float("inf")


_cache: OrderedDict = OrderedDict()
_cache_lock = threading.Lock()


def checked_call(version, C: int, *, block_size: int | None = None, overwrite: bool = False,
                 config=None) -> validate.Call:
    """The :class:`~rmsnorm_lessons.core.validate.Call` of ``version`` at width ``C``: the one
    lookup of the version and the one check of its options."""
    rung = ladder.get(version)
    block, overwrite = validate.options(rung, block_size, overwrite, config)
    return validate.call(rung, C, block, overwrite, config)


def launcher(version, C: int, *, block_size: int | None = None, overwrite: bool = False,
             config=None) -> Launcher:
    """A cached :class:`Launcher` of ``version`` at width ``C`` (at most :data:`CACHE_SIZE` are
    kept; the oldest is freed)."""
    return launcher_for(checked_call(version, C, block_size=block_size, overwrite=overwrite,
                                     config=config))


def launcher_for(call: validate.Call) -> Launcher:
    """The cached :class:`Launcher` of a checked call (:func:`launcher` from a version name)."""
    rung = call.rung
    key = (rung.name, rung.source, call.C, call.block, call.overwrite, call.config,
           build.target_arch())
    with _cache_lock:
        found = _cache.get(key)
        if found is not None:
            _cache.move_to_end(key)
            return found
    made = Launcher(call)
    with _cache_lock:
        found = _cache.setdefault(key, made)
        _cache.move_to_end(key)
        while len(_cache) > CACHE_SIZE:
            _, old = _cache.popitem(last=False)
            old.free()
    return found


def release() -> None:
    """Free every cached launcher's scratch and forget the launchers (and the foreign-stream
    bridges)."""
    if not gpu.available():
        return
    with gpu.in_context(), _cache_lock:
        for L in _cache.values():
            L.free()
        _cache.clear()
    with gpu.in_context(), _bridges_lock:
        for b in _bridges.values():
            b.close()
        _bridges.clear()


_bridges: OrderedDict = OrderedDict()
_bridges_lock = threading.Lock()


def resolve_stream(stream):
    """``(pycuda_stream_or_None, bridge_or_None)`` for what a caller passed as ``stream``."""
    handle = gpu.foreign_handle(stream)
    if handle is None:
        return stream, None
    if handle == 0:  # the legacy default stream is PyCUDA's None
        return None, None
    with _bridges_lock:
        bridge = _bridges.get(handle)
        if bridge is None:
            bridge = gpu.StreamBridge(handle)
            _bridges[handle] = bridge
            while len(_bridges) > 16:
                _bridges.popitem(last=False)[1].close()
        return bridge.stream, bridge
