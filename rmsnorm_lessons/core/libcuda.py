"""The CUDA driver calls PyCUDA does not offer, through ctypes on ``libcuda.so.1``: one wrapper for
all.

:class:`rmsnorm_lessons.core.gpu.StreamBridge` records and waits for events on streams PyCUDA did
not make;
:mod:`rmsnorm_lessons.inspection.occupancy` asks the driver for a device's limits and a kernel's
occupancy (PyCUDA's
``Function`` keeps its ``CUfunction`` to itself, so the cubin is loaded again as a module of its
own). Every call runs in the context the caller made current
(:func:`rmsnorm_lessons.core.gpu.require`).
"""
from __future__ import annotations

import ctypes
import threading

P, I, U, S, V = ctypes.POINTER, ctypes.c_int, ctypes.c_uint, ctypes.c_size_t, ctypes.c_void_p


class AttributeValue(ctypes.Union):
    """CUlaunchAttributeValue (cuda.h): 64 bytes, 8-byte aligned; the members used here."""
    _fields_ = [("pad", ctypes.c_char * 64), ("as_int", ctypes.c_int),
                ("cluster_dim", ctypes.c_uint * 3), ("align", ctypes.c_uint64)]


class LaunchAttribute(ctypes.Structure):
    """CUlaunchAttribute: the id, 4 bytes of padding, the value."""
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", AttributeValue)]


class LaunchConfig(ctypes.Structure):
    """CUlaunchConfig (tests/test_lab_pdl.py checks these layouts against cuda.h)."""
    _fields_ = [("gridDimX", U), ("gridDimY", U), ("gridDimZ", U), ("blockDimX", U),
                ("blockDimY", U), ("blockDimZ", U), ("sharedMemBytes", U), ("hStream", V),
                ("attrs", P(LaunchAttribute)), ("numAttrs", U)]


#: CUlaunchAttributeID values (cuda.h)
CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4
CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6
#: a kernel that does nothing, as PTX the driver compiles (no nvcc needed): asked for a whole SM's
#: shared memory, its blocks take one SM each, as v7's wide kernels' do
WHOLE_SM_PTX = b""".version 7.8
.target sm_90
.address_size 64
.visible .entry rmsnorm_lessons_whole_sm()
{
    ret;
}
\0"""

#: the argument types of every function used here (all return a CUresult)
SIGNATURES = {
    "cuGetErrorString": [I, P(ctypes.c_char_p)],
    "cuCtxGetDevice": [P(I)],
    "cuDeviceGetAttribute": [P(I), I, I],
    "cuEventCreate": [P(V), U],
    "cuEventRecord": [V, V],
    "cuEventDestroy_v2": [V],
    "cuStreamWaitEvent": [V, V, U],
    "cuModuleLoadData": [P(V), V],
    "cuModuleGetFunction": [P(V), V, ctypes.c_char_p],
    "cuModuleUnload": [V],
    "cuFuncGetAttribute": [P(I), I, V],
    "cuFuncSetAttribute": [V, I, I],
    "cuOccupancyMaxActiveBlocksPerMultiprocessor": [P(I), V, I, S],
    "cuOccupancyMaxActiveClusters": [P(I), V, P(LaunchConfig)],
}

CU_EVENT_DISABLE_TIMING = 2
CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1
CU_FUNC_ATTRIBUTE_NUM_REGS = 4
CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
DEVICE_ATTRIBUTES = {  # CUdevice_attribute values (cuda.h)
    "max_threads_per_block": 1,
    "max_shared_memory_per_block": 8,
    "max_registers_per_block": 12,
    "multiprocessor_count": 16,
    "max_threads_per_multiprocessor": 39,
    "compute_capability_major": 75,
    "compute_capability_minor": 76,
    "max_shared_memory_per_multiprocessor": 81,
    "max_registers_per_multiprocessor": 82,
    "max_shared_memory_per_block_optin": 97,
    "max_blocks_per_multiprocessor": 106,
    "reserved_shared_memory_per_block": 111,
}


class LibCuda:
    """``libcuda.so.1`` with the argument types of :data:`SIGNATURES`; ``lib.cuX(...)`` calls the
    driver and :meth:`check` turns a CUresult other than 0 into a RuntimeError naming the call."""

    def __init__(self):
        lib = ctypes.CDLL("libcuda.so.1")
        for name, args in SIGNATURES.items():
            # a driver older than a call (cuOccupancyMaxActiveClusters: CUDA 11.8) lacks it: the
            # others still work, and calling the missing one raises AttributeError
            fn = getattr(lib, name, None)
            if fn is not None:
                fn.argtypes, fn.restype = args, I
        self.lib = lib

    def check(self, result: int, what: str) -> None:
        if result != 0:
            msg = ctypes.c_char_p()
            self.lib.cuGetErrorString(result, ctypes.byref(msg))
            raise RuntimeError(f"{what} failed: CUDA error {result} "
                               f"({(msg.value or b'?').decode()})")

    def call(self, name: str, *args) -> None:
        """``lib.<name>(*args)``, checked."""
        self.check(getattr(self.lib, name)(*args), name)

    def device_attribute(self, name: str) -> int:
        """One :data:`DEVICE_ATTRIBUTES` entry of the current context's device."""
        dev, value = ctypes.c_int(), ctypes.c_int()
        self.call("cuCtxGetDevice", ctypes.byref(dev))
        self.check(self.lib.cuDeviceGetAttribute(ctypes.byref(value), DEVICE_ATTRIBUTES[name],
                                                 dev.value),
                   f"cuDeviceGetAttribute({name})")
        return value.value

    def resident_clusters(self, sizes, shared_per_block: int, multiprocessors: int) -> tuple:
        """``((size, clusters), ...)``: for each cluster size, how many clusters of whole-SM blocks
        the device runs at once (cuOccupancyMaxActiveClusters, sm_90 and newer). A cluster's blocks
        run on one GPC, so this depends on how the SMs divide into GPCs, not only on their count."""
        module, function = ctypes.c_void_p(), ctypes.c_void_p()
        self.call("cuModuleLoadData", ctypes.byref(module), ctypes.c_char_p(WHOLE_SM_PTX))
        try:
            self.call("cuModuleGetFunction", ctypes.byref(function), module,
                      b"rmsnorm_lessons_whole_sm")
            self.call("cuFuncSetAttribute", function,
                      CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared_per_block)
            found = []
            for size in sizes:
                attrs = (LaunchAttribute * 1)()
                attrs[0].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
                attrs[0].value.cluster_dim[:] = [size, 1, 1]
                config = LaunchConfig(size * multiprocessors, 1, 1, 32, 1, 1, shared_per_block,
                                      None, attrs, 1)
                count = ctypes.c_int(0)
                self.call("cuOccupancyMaxActiveClusters", ctypes.byref(count), function,
                          ctypes.byref(config))
                found.append((int(size), count.value))
            return tuple(found)
        finally:
            self.lib.cuModuleUnload(module)

    def event(self, flags: int = CU_EVENT_DISABLE_TIMING) -> ctypes.c_void_p:
        ev = ctypes.c_void_p()
        self.call("cuEventCreate", ctypes.byref(ev), flags)
        return ev


_lib: LibCuda | None = None
_lock = threading.Lock()


def get() -> LibCuda:
    """The process's one :class:`LibCuda` (loaded on first use)."""
    global _lib
    with _lock:
        if _lib is None:
            _lib = LibCuda()
        return _lib
