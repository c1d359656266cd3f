"""GPU access in one place: PyCUDA on the device's primary context, created on first use.

Everything that needs a device calls :func:`require`; where there is no PyCUDA, no driver or no device
it raises :class:`GpuUnavailable` with one sentence saying which and what to do. The primary context is
the one the CUDA runtime (and so PyTorch) uses, so arrays can be shared with PyTorch later.
"""
from __future__ import annotations

import atexit
import os
import statistics
from dataclasses import dataclass


class GpuUnavailable(RuntimeError):
    """No usable CUDA device here; the message says why and what to do."""


@dataclass
class _Gpu:
    driver: object  # the pycuda.driver module
    device: object
    context: object


_gpu: _Gpu | None = None
_failure: GpuUnavailable | None = None


def _has_driver_library() -> bool:
    import ctypes

    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


def _start() -> _Gpu:
    try:
        import pycuda.driver as drv
    except ImportError as exc:
        if "libcuda" in str(exc) or not _has_driver_library():
            raise GpuUnavailable(
                "No NVIDIA driver here (libcuda.so.1 is missing): kernels can be compiled and inspected, "
                "but launching them needs a machine with an NVIDIA GPU."
            ) from exc
        raise GpuUnavailable(
            "PyCUDA is not installed: on a machine with an NVIDIA GPU run `make test` or "
            "`pip install -e '.[gpu]'`; without a GPU, the compile-only parts of the course still work."
        ) from exc
    try:
        drv.init()
        count = drv.Device.count()
    except drv.Error as exc:
        raise GpuUnavailable(
            f"The NVIDIA driver could not start CUDA ({exc}); check `nvidia-smi` on this machine."
        ) from exc
    if count == 0:
        raise GpuUnavailable("The NVIDIA driver found no CUDA device on this machine.")
    index = int(os.environ.get("RMSNORM_LESSONS_DEVICE", "0"))
    if not 0 <= index < count:
        raise GpuUnavailable(f"RMSNORM_LESSONS_DEVICE={index} but this machine has {count} device(s).")
    device = drv.Device(index)
    context = device.retain_primary_context()
    context.push()
    atexit.register(_shutdown)
    return _Gpu(drv, device, context)


def _shutdown() -> None:
    global _gpu
    if _gpu is None:
        return
    import gc

    from . import build

    build.clear_module_cache()
    gc.collect()
    try:
        _gpu.context.synchronize()
        _gpu.driver.Context.pop()
    except Exception:
        pass
    _gpu = None


def require() -> _Gpu:
    """The started GPU, or :class:`GpuUnavailable` (the same one on every call)."""
    global _gpu, _failure
    if _gpu is not None:
        return _gpu
    if _failure is not None:
        raise _failure
    try:
        _gpu = _start()
    except GpuUnavailable as exc:
        _failure = exc
        raise
    return _gpu


def available() -> bool:
    try:
        require()
        return True
    except GpuUnavailable:
        return False


def why_unavailable() -> str | None:
    """None where a GPU works, else the sentence :class:`GpuUnavailable` carries."""
    try:
        require()
        return None
    except GpuUnavailable as exc:
        return str(exc)


def driver():
    """The ``pycuda.driver`` module, with the context current."""
    return require().driver


def synchronize() -> None:
    require().context.synchronize()


@dataclass(frozen=True)
class DeviceFacts:
    name: str
    compute_capability: tuple[int, int]
    multiprocessors: int
    shared_memory_per_block: int  # bytes, without opt-in
    shared_memory_per_block_optin: int  # bytes, with cudaFuncAttributeMaxDynamicSharedMemorySize
    shared_memory_per_multiprocessor: int
    max_threads_per_multiprocessor: int
    registers_per_multiprocessor: int
    l2_bytes: int
    total_memory: int
    driver_version: int

    @property
    def arch(self) -> str:
        return "sm_%d%d" % self.compute_capability


def facts() -> DeviceFacts:
    g = require()
    attr = g.driver.device_attribute
    d = g.device
    return DeviceFacts(
        name=d.name(),
        compute_capability=d.compute_capability(),
        multiprocessors=d.get_attribute(attr.MULTIPROCESSOR_COUNT),
        shared_memory_per_block=d.get_attribute(attr.MAX_SHARED_MEMORY_PER_BLOCK),
        shared_memory_per_block_optin=d.get_attribute(attr.MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
        shared_memory_per_multiprocessor=d.get_attribute(attr.MAX_SHARED_MEMORY_PER_MULTIPROCESSOR),
        max_threads_per_multiprocessor=d.get_attribute(attr.MAX_THREADS_PER_MULTIPROCESSOR),
        registers_per_multiprocessor=d.get_attribute(attr.MAX_REGISTERS_PER_MULTIPROCESSOR),
        l2_bytes=d.get_attribute(attr.L2_CACHE_SIZE),
        total_memory=d.total_memory(),
        driver_version=g.driver.get_driver_version(),
    )


class Timer:
    """CUDA events around a region: ``with Timer() as t: ...`` then ``t.ms`` (synchronises at exit)."""

    def __init__(self, stream=None):
        drv = driver()
        self.stream = stream
        self.start, self.stop = drv.Event(), drv.Event()
        self.ms = float("nan")

    def __enter__(self):
        self.start.record(self.stream)
        return self

    def __exit__(self, *exc):
        self.stop.record(self.stream)
        self.stop.synchronize()
        self.ms = self.stop.time_since(self.start)
        return False


def copy_bandwidth(nbytes: int = 1 << 30, warmup: int = 3, repeats: int = 20) -> float:
    """Device-to-device copy bandwidth in GB/s, counting bytes read plus bytes written (median).

    This is the speed-of-light line of the course: a memory-bound kernel cannot move bytes faster.
    """
    drv = driver()
    src = drv.mem_alloc(nbytes)
    dst = drv.mem_alloc(nbytes)
    try:
        drv.memset_d8(src, 1, nbytes)
        times = []
        for i in range(warmup + repeats):
            with Timer() as t:
                drv.memcpy_dtod(dst, src, nbytes)
            if i >= warmup:
                times.append(t.ms)
        return 2 * nbytes / (statistics.median(times) * 1e-3) / 1e9
    finally:
        src.free()
        dst.free()
