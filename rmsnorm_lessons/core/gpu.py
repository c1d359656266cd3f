"""GPU access in one place: PyCUDA on the device's primary context, created on first use.

Everything that needs a device calls :func:`require`; where there is no PyCUDA, no driver or no
device it raises :class:`GpuUnavailable` with one sentence saying which and what to do. The primary
context is the one the CUDA runtime (and so PyTorch) uses, so arrays can be shared with PyTorch
later.
"""
from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import statistics
import sys
import threading
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
_start_lock = threading.Lock()
_thread = threading.local()  # .current: the primary context is current in this thread
_shutdown_hooks: list = []


def on_shutdown(hook) -> None:
    """Call ``hook()`` before the context goes away at exit (the build's module cache registers
    here)."""
    _shutdown_hooks.append(hook)


def _has_driver_library() -> bool:
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
                "No NVIDIA driver here (libcuda.so.1 is missing): kernels can be compiled and "
                "inspected, but launching them needs a machine with an NVIDIA GPU."
            ) from exc
        raise GpuUnavailable(
            "PyCUDA is not installed: on a machine with an NVIDIA GPU run `make test` or "
            "`pip install -e '.[gpu]'`; without a GPU, the compile-only parts of the course still "
            "work."
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
        raise GpuUnavailable(f"RMSNORM_LESSONS_DEVICE={index} but this machine has {count} "
                             f"device(s).")
    device = drv.Device(index)
    context = device.retain_primary_context()
    atexit.register(_shutdown)
    return _Gpu(drv, device, context)


def _shutdown() -> None:
    global _gpu
    if _gpu is None:
        return
    import gc

    try:
        if not getattr(_thread, "current", False):  # the GPU was used from other threads only
            _gpu.context.push()
        for hook in _shutdown_hooks:
            hook()
        gc.collect()
        _gpu.context.synchronize()
        _gpu.driver.Context.pop()
    except Exception:
        pass
    _thread.current = False
    _gpu = None


def require() -> _Gpu:
    """The started GPU, or :class:`GpuUnavailable` (the same one on every call).

    The main thread keeps the primary context current until exit. Other threads get it with
    ``with in_context():`` (``run`` and ``forward`` do that themselves): PyCUDA keeps a context
    stack per thread and aborts the process when a thread ends with a context still pushed, so a
    pushed context must be popped before the thread ends.
    """
    global _gpu, _failure
    g = _gpu
    if g is None:
        with _start_lock:
            if _failure is not None:
                raise _failure
            if _gpu is None:
                try:
                    _gpu = _start()
                except GpuUnavailable as exc:
                    _failure = exc
                    raise
            g = _gpu
    if (threading.current_thread() is threading.main_thread()
            and not getattr(_thread, "current", False)):
        g.context.push()  # the main thread keeps it until exit (_shutdown pops it)
        _thread.current = True
    return g


@contextlib.contextmanager
def in_context():
    """Make the primary context current in this thread for the block (a no-op where it already
    is)."""
    g = require()
    if getattr(_thread, "current", False):
        yield g
        return
    g.context.push()
    _thread.current = True
    try:
        yield g
    finally:
        _thread.current = False
        g.driver.Context.pop()


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
    #: (cluster size, clusters of whole-SM blocks the driver runs at once) pairs, where known
    #: (cuOccupancyMaxActiveClusters; v7_fast's plan reads them for rows split over a cluster)
    resident_clusters: tuple = ()
    #: the SM clock in kHz (cuDeviceGetAttribute(CLOCK_RATE)); 0 where not known
    clock_khz: int = 0

    @property
    def arch(self) -> str:
        return "sm_%d%d" % self.compute_capability


#: The H200 this course was measured on (`python -m rmsnorm_lessons info` there, 2026-12-02): the
# labelled
#: fallback where no GPU is present, so lessons can still say what a plan does on the course's GPU.
H200 = DeviceFacts(
    name="NVIDIA H200", compute_capability=(9, 0), multiprocessors=132,
    shared_memory_per_block=48 * 1024,
    shared_memory_per_block_optin=227 * 1024, shared_memory_per_multiprocessor=228 * 1024,
    max_threads_per_multiprocessor=2048, registers_per_multiprocessor=65536,
    l2_bytes=60 * 1024 * 1024,
    total_memory=150_110_011_392, driver_version=13000,
    # measured 2026-12-03 with v7's wide kernels (results/h200-2026-12-03b/v8-rings-check.log); a
    # GPU test asks the driver again
    resident_clusters=((2, 66), (4, 30)),
    clock_khz=1_980_000,  # `rl.gpu.facts()` there; lesson 00 prints it
)
#: the copy bandwidth measured in the run the course's published figures come from
#: (results/h200-2026-12-02/bench.json; a test keeps the two equal)
H200_COPY_GBPS = 4161.8
SAVED_DATE = "2026-12-02"


def facts_or_fallback() -> tuple[DeviceFacts, str]:
    """This GPU's facts and a label saying so; without a GPU, :data:`H200` labelled as saved
    facts."""
    if available():
        f = facts()
        return f, f"{f.name} (this GPU)"
    return H200, f"{H200.name} (saved facts of {SAVED_DATE}: no GPU here)"


def target_facts_or_fallback() -> tuple[DeviceFacts, str]:
    """:func:`facts_or_fallback` as the build target has them (``RMSNORM_ARCH``,
    :func:`rmsnorm_lessons.core.devices.facts_for_target`): the facts plans and checks read."""
    from . import devices

    f, label = facts_or_fallback()
    target = devices.facts_for_target(f)
    if target is f:
        return f, label
    return target, f"{target.name} (built for {devices.target_arch()})"


def copy_bandwidth_or_saved() -> tuple[float, str]:
    """The copy bandwidth measured now on this GPU, or the H200's saved figure, with a label saying
    which."""
    if available():
        f = facts()
        return copy_bandwidth(), f"measured now on {f.name}"
    return H200_COPY_GBPS, f"saved: {H200.name}, {SAVED_DATE} (no GPU here)"


def fp32_peak_flops(f: DeviceFacts) -> float | None:
    """FP32 FLOP/s at the SM clock: SMs x FP32 lanes per SM x 2 (a fused multiply-add counts as
    two FLOPs) x clock. None where the lanes of the arch (:data:`.devices.FP32_LANES_PER_SM`) or
    the clock are not known."""
    from . import devices

    lanes = devices.FP32_LANES_PER_SM.get(devices.real_arch(f.arch))
    if not lanes or not f.clock_khz:
        return None
    return f.multiprocessors * lanes * 2 * f.clock_khz * 1e3


_facts: DeviceFacts | None = None


def facts() -> DeviceFacts:
    """The device's facts (read once: a device does not change under a process)."""
    global _facts
    if _facts is None:
        _facts = _read_facts()
    return _facts


def _read_facts() -> DeviceFacts:
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
        resident_clusters=_resident_clusters(
            d.name(), d.compute_capability(),
            d.get_attribute(attr.MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
            d.get_attribute(attr.MULTIPROCESSOR_COUNT)),
        clock_khz=d.get_attribute(attr.CLOCK_RATE),
    )


#: the cluster sizes whose resident counts the facts hold (v7_fast's wide kernels use 2 and 4; a
#: test keeps them covered)
CLUSTER_SIZES = (2, 4, 8)


def _resident_clusters(name: str, capability, shared_optin: int, multiprocessors: int) -> tuple:
    """The driver's count of clusters of whole-SM blocks it runs at once, per size (sm_90 and
    newer; () before); where the driver cannot say, the H200's saved figures on an H200, else ()
    (a plan then assumes every SM in use, which may leave clusters for a second round)."""
    if tuple(capability) < (9, 0):
        return ()
    try:
        from . import libcuda

        return libcuda.get().resident_clusters(CLUSTER_SIZES, shared_optin, multiprocessors)
    except (OSError, RuntimeError, AttributeError) as exc:
        print(f"rmsnorm_lessons: the driver did not say how many clusters run at once ({exc})",
              file=sys.stderr)
        return H200.resident_clusters if name == H200.name else ()


class Timer:
    """CUDA events around a region: ``with Timer() as t: ...`` then ``t.ms`` (synchronises at
    exit)."""

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


def copy_bandwidth(nbytes: int = 1 << 30, warmup: int = 3, repeats: int = 20, *,
                   timed=None) -> float:
    """Device-to-device copy bandwidth in GB/s, counting bytes read plus bytes written (median).

    This is the speed-of-light line of the course: a memory-bound kernel cannot move bytes faster.
    ``timed(dst, src)``, where given, copies ``nbytes`` from ``src`` to ``dst`` its own way and
    returns the milliseconds of each copy (the bench's copy kernel); by default each of ``warmup +
    repeats`` ``cuMemcpyDtoD`` calls is timed with events and the first ``warmup`` dropped.
    """
    drv = driver()
    src = drv.mem_alloc(nbytes)
    dst = drv.mem_alloc(nbytes)
    try:
        drv.memset_d8(src, 1, nbytes)
        if timed is not None:
            times = timed(dst, src)
        else:
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


# --- streams that are not PyCUDA's (PyTorch's, a raw CUstream handle)
# ----------------------------------- PyCUDA launches only on its own Stream objects. A foreign
# stream F is joined through a private stream S and two events: S waits for what F holds so far, the
# launches go on S, then F waits for S. The events are the driver's (cuEventRecord,
# cuStreamWaitEvent), called through ctypes on libcuda: PyCUDA offers no way to record an event on a
# stream it did not make.


def as_bytes(a):
    """The bytes of the contiguous NumPy array ``a`` (a uint8 view: writing to it writes to ``a``),
    for PyCUDA's copies, which go through the buffer protocol that ml_dtypes' bfloat16 does not
    export."""
    import numpy as np

    return a.view(np.uint8)


def foreign_handle(stream) -> int | None:
    """The raw CUstream of ``stream`` when it is not a PyCUDA Stream (None for PyCUDA's or for
    None).

    Accepts an int handle, a PyTorch stream (``.cuda_stream``) or anything with an int
    ``.handle``."""
    if stream is None or type(stream).__module__.startswith("pycuda"):
        return None
    if isinstance(stream, bool):
        raise TypeError("stream must be None, a PyCUDA Stream, a PyTorch stream or an int CUstream "
                        "handle, got bool")
    if isinstance(stream, int):
        handle = stream
    elif isinstance(getattr(stream, "cuda_stream", None), int):
        handle = stream.cuda_stream
    elif isinstance(getattr(stream, "handle", None), int):
        handle = stream.handle
    else:
        raise TypeError(f"stream must be None, a PyCUDA Stream, a PyTorch stream or an int "
                        f"CUstream handle, got {type(stream).__module__}.{type(stream).__name__}")
    if handle < 0:
        raise ValueError(f"stream handle must be a CUstream (a non-negative int), got {handle}")
    return handle


class StreamBridge:
    """A private PyCUDA stream joined to a foreign stream before and after each use."""

    def __init__(self, handle: int):
        from . import libcuda

        g = require()
        self._cu = libcuda.get()
        self.handle = handle
        self.stream = g.driver.Stream()
        self._events = [self._cu.event(), self._cu.event()]

    def _join(self, waiter: int, event, producer: int) -> None:
        self._cu.call("cuEventRecord", event, ctypes.c_void_p(producer))
        self._cu.call("cuStreamWaitEvent", ctypes.c_void_p(waiter), event, 0)

    def enter(self) -> None:
        """The private stream waits for the work queued on the foreign stream so far."""
        self._join(self.stream.handle, self._events[0], self.handle)

    def leave(self) -> None:
        """Work queued on the foreign stream from now on waits for the private stream's work."""
        self._join(self.handle, self._events[1], self.stream.handle)

    def close(self) -> None:
        self.stream.synchronize()
        for ev in self._events:
            self._cu.lib.cuEventDestroy_v2(ev)
        self._events = []
