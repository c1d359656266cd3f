"""Helpers shared by the tests (imported by them; nothing here touches a GPU at import).

* GPU tests: device copies of a problem, the :class:`~rmsnorm_lessons.core.launch.Tensors` of them,
the
  float64 reference and the comparison (through ``compare.compare_outputs``, the course's one
  comparison).
* CPU tests: :func:`install_fake_cuda` replaces the driver, the device and the compiler seen by
  :mod:`rmsnorm_lessons.core.launch` with fakes that record what would be launched, so a real
  :class:`~rmsnorm_lessons.core.launch.Launcher` can be exercised without a GPU.
"""
from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np

import rmsnorm_lessons as rl
from rmsnorm_lessons.core import build, compare, gpu, ladder, launch, reference

TENSORS = ("dout", "inp", "weight", "rstd", "dinp", "dweight")


def to_device(p: dict) -> dict:
    """GPUArrays holding a copy of every tensor of a problem from ``reference.random_problem``."""
    from pycuda import gpuarray

    return {k: gpuarray.to_gpu(np.ascontiguousarray(p[k])) for k in TENSORS}


def tensors(dev: dict) -> launch.Tensors:
    """The device addresses of a dict of GPUArrays (or of anything with an int address)."""
    return launch.Tensors(**{k: int(getattr(dev[k], "gpudata", dev[k]))
                             for k in launch.Tensors._fields})


def free(dev: dict) -> None:
    """Free the device memory of GPUArrays made by :func:`to_device` (now, not at garbage
    collection)."""
    for a in dev.values():
        data = getattr(a, "gpudata", None)
        if data is not None and hasattr(data, "free"):
            data.free()


def reference_of(p: dict, dinp=None, dweight=None):
    """The float64 reference for problem ``p``, accumulating into its own (or the given) outputs."""
    return reference.backward(p["dout"], p["inp"], p["weight"], p["rstd"],
                              p["dinp"] if dinp is None else dinp, p["dweight"] if dweight is None
                              else dweight)


def compare_both(version, N, got, want, label=""):
    """Both comparisons with the course's tolerances (``compare.compare_outputs``); prints
    ||err||/||ref|| and max |err| (see ``-s``); returns ``(dinp comparison, dweight
    comparison)``."""
    spec = rl.ladder.get(version)
    report = compare.compare_outputs(spec, N, got, want, name=spec.name)
    a, b = report.dinp, report.dweight
    print(f"{spec.name:<15} {label:<22} dinp ||err||/||ref|| {a.rel_l2_error:.2e} max "
          f"{a.max_abs_error:.2e} | dweight ||err||/||ref|| {b.rel_l2_error:.2e} max "
          f"{b.max_abs_error:.2e}", flush=True)
    return a, b


def bits(x) -> np.ndarray:
    """Raw bits of a float32 or bf16 array, for bitwise comparisons."""
    x = np.ascontiguousarray(np.asarray(x))
    return x.view(np.uint32 if x.dtype.itemsize == 4 else np.uint16)


# --------------------------------------------------------------------------------------------------
# kernel signatures, read from the CUDA text


def _strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


_ENTRY = re.compile(r'extern\s+"C"\s+__global__\s+(?:void\s+)?'
                    r'(?:__launch_bounds__\s*(\((?:[^()]|\([^()]*\))*\))\s*)?'
                    r'(?:void\s+)?(\w+)\s*\(')


@dataclass(frozen=True)
class Param:
    name: str
    pointer: bool
    ctype: str  # the declaration without the name ("const float*", "int")


@dataclass(frozen=True)
class Signature:
    kernel: str
    params: tuple
    launch_bounds: str | None = None  # the text inside __launch_bounds__(...), if any
    max_threads: int | None = field(default=None)  # its first argument when it is a plain number


def kernel_signatures(cuda_text: str) -> dict:
    """``{kernel name: Signature}`` of every ``extern "C" __global__`` function of a CUDA text."""
    text = _strip_comments(cuda_text)
    found = {}
    for m in _ENTRY.finditer(text):
        bounds, name = m.group(1), m.group(2)
        depth, i = 1, m.end()
        while depth:
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        inner = text[m.end():i - 1]
        params = []
        for decl in (d.strip() for d in _split_top_level(inner)):
            if not decl or decl == "void":
                continue
            pm = re.fullmatch(r"(.*?)(\w+)\s*(\[\s*\])?", decl, flags=re.S)
            assert pm, f"{name}: cannot read the parameter {decl!r}"
            ctype = " ".join(pm.group(1).split())
            params.append(Param(pm.group(2), "*" in ctype or bool(pm.group(3)), ctype))
        bounds = bounds[1:-1].strip() if bounds else None
        first = bounds.split(",")[0].strip() if bounds else None
        found[name] = Signature(name, tuple(params), bounds, int(first) if first
                                and first.isdigit() else None)
    return found


def _split_top_level(text: str) -> list:
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "(<[":
            depth += 1
        elif ch in ")>]":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


_INCLUDE = re.compile(r'^#include "([^"]+)"', re.M)


def rung_signatures(version) -> dict:
    """The signatures of a rung's kernels, from its CUDA (``kernels/<name>.cu`` or its registered
    source) and the headers of kernels/ it includes (v7_fast's staged and wide kernels are in its
    headers)."""
    _, text, _ = build.kernel_text(ladder.get(version))
    headers = [build.kernel_source(name) for name in _INCLUDE.findall(text)]
    return kernel_signatures("\n".join([text, *headers]))


# --------------------------------------------------------------------------------------------------
# a fake CUDA for the launcher (CPU tests)


class FakeDriverError(Exception):
    pass


class FakeLogicError(FakeDriverError):
    pass


class FakeAllocation:
    def __init__(self, driver, address: int, nbytes: int):
        self.driver, self.address, self.nbytes, self.freed = driver, address, nbytes, False

    def __int__(self):
        return self.address

    def free(self):
        assert not self.freed, "freed twice"
        self.freed = True
        self.driver.log.append(("free", self.address))


class FakeStream:
    """Looks like a PyCUDA Stream to the launcher (its module name starts with pycuda, as PyCUDA's
    does)."""

    __module__ = "pycuda.fake"
    _next = 0x5000

    def __init__(self):
        FakeStream._next += 16
        self.handle = FakeStream._next
        self.synchronized = 0

    def synchronize(self):
        self.synchronized += 1


class FakeFunction:
    def __init__(self, driver, name: str, static: int):
        self.driver, self.name, self.static = driver, name, static
        self.codes = None

    def prepare(self, codes):
        self.codes = codes

    def get_attribute(self, attr):
        assert attr == "SHARED_SIZE_BYTES", attr
        return self.static

    def set_attribute(self, attr, value):
        self.driver.log.append(("set_attribute", self.name, attr, value))

    def prepared_async_call(self, grid, block, stream, *args, shared_size=0):
        if self.driver.fail:
            raise FakeDriverError("cuLaunchKernel failed: invalid argument")
        self.driver.log.append(("launch", self.name, grid, block, stream, args, shared_size))


class FakeDriver:
    """The parts of ``pycuda.driver`` the launcher uses; every call is appended to ``log``."""

    Error = FakeDriverError
    LogicError = FakeLogicError
    function_attribute = SimpleNamespace(
        SHARED_SIZE_BYTES="SHARED_SIZE_BYTES",
        MAX_DYNAMIC_SHARED_SIZE_BYTES="MAX_DYNAMIC_SHARED_SIZE_BYTES")

    def __init__(self, static=0, fail=False):
        self.static = static  # int, or {kernel: static shared bytes}
        self.fail = fail
        self.log = []
        self.allocations = []
        self.synchronized = 0
        self._next = 0x7F00_0000_0000

    def mem_alloc(self, nbytes):
        a = FakeAllocation(self, self._next, int(nbytes))
        self._next += -(-int(nbytes) // 256) * 256 + 256
        self.allocations.append(a)
        self.log.append(("alloc", a.address, a.nbytes))
        return a

    def memset_d8_async(self, buf, value, nbytes, stream=None):
        self.log.append(("memset", int(buf), value, nbytes, stream))

    def launches(self):
        return [e for e in self.log if e[0] == "launch"]

    def live(self):
        return [a for a in self.allocations if not a.freed]


class FakeModule:
    def __init__(self, driver, kernels):
        self.driver, self.kernels = driver, set(kernels)
        self.functions = {}

    def get_function(self, name):
        if name not in self.kernels:
            raise FakeLogicError(f"cuModuleGetFunction failed: named symbol not found ({name})")
        if name not in self.functions:
            static = self.driver.static.get(name, 0) if isinstance(self.driver.static,
                                                                   dict) else self.driver.static
            self.functions[name] = FakeFunction(self.driver, name, static)
        return self.functions[name]


def install_fake_cuda(monkeypatch, device=gpu.H200, static=0, fail=False,
                      kernels_in_module=None) -> FakeDriver:
    """Make :mod:`rmsnorm_lessons.core.launch` see a fake driver, ``device`` and a fake compiled
    module.

    The caller must call ``launch.release()`` before ``monkeypatch`` is undone when it used the
    launcher cache (the :func:`fake_cuda` fixtures of the tests do).
    """
    drv = FakeDriver(static=static, fail=fail)

    def sync():
        drv.synchronized += 1

    fake_gpu = SimpleNamespace(driver=drv, device=None, context=SimpleNamespace(synchronize=sync))

    @contextlib.contextmanager
    def in_context():
        yield fake_gpu

    monkeypatch.setattr(gpu, "require", lambda: fake_gpu)
    monkeypatch.setattr(gpu, "in_context", in_context)
    monkeypatch.setattr(gpu, "available", lambda: True)
    monkeypatch.setattr(gpu, "facts", lambda: device)
    modules = {}

    def source_module(rung, *args, **kwargs):
        rung = ladder.get(rung)
        names = rung.kernels if kernels_in_module is None else kernels_in_module
        return modules.setdefault(rung.name, FakeModule(drv, names))

    monkeypatch.setattr(build, "source_module", source_module)
    return drv


# --------------------------------------------------------------------------------------------------
# a stand-in for a GPUArray (CPU tests of the checks)


class FakeGPUArray:
    """Enough of pycuda.gpuarray.GPUArray for the input checks: no device memory behind it.

    As PyCUDA's, an array of size 0 may carry ``gpudata=None`` (pass ``address=None``)."""

    def __init__(self, shape, dtype, address=0x7F00_0000_0000, contiguous=True):
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.ndim = len(self.shape)
        self.gpudata = address
        self.flags = SimpleNamespace(c_contiguous=contiguous, f_contiguous=False, forc=contiguous)
        strides, step = [], self.dtype.itemsize
        for s in reversed(self.shape):
            strides.insert(0, step)
            step *= s
        self.strides = tuple(strides) if contiguous else tuple(2 * s for s in strides)
        self.size = int(np.prod(self.shape))
        self.nbytes = self.size * self.dtype.itemsize


FAKE_BASE = 0x7F00_0000_0000
FAKE_SPACING = 1 << 40  # far enough apart that no two fake tensors overlap, even at N = 2**31


def fakes(version, N=6, C=16, **override) -> dict:
    """Fake GPUArrays for every tensor of a call, each at its own address (16-byte aligned, no
    overlap)."""
    spec = rl.ladder.get(version)
    shapes = dict(dout=(N, C), inp=(N, C), weight=(C,), rstd=(N,), dinp=(N, C), dweight=(C,))
    out = {}
    for i, (k, shape) in enumerate(shapes.items()):
        dtype = np.float32 if k == "rstd" else spec.dtype
        out[k] = FakeGPUArray(shape, dtype, address=FAKE_BASE + i * FAKE_SPACING)
    out.update(override)
    return out


def busy(stream, seconds: float) -> None:
    """Queue a kernel that spins for about ``seconds`` on ``stream`` (a PyCUDA Stream or None)."""
    drv = gpu.driver()
    fn = build.source_module("timing").get_function("gpu_sleep")
    clock_khz = gpu.require().device.get_attribute(drv.device_attribute.CLOCK_RATE)
    fn(np.int64(int(seconds * clock_khz * 1e3)), block=(1, 1, 1), grid=(1, 1, 1), stream=stream)


def clock_hz() -> float:
    drv = gpu.driver()
    return gpu.require().device.get_attribute(drv.device_attribute.CLOCK_RATE) * 1e3


# --------------------------------------------------------------------------------------------------
# code that may end the process (PyCUDA aborts when a thread exits with a context on its stack): run
# it in a child process, so that the test fails and the rest of the session goes on


def run_in_child(code: str, timeout: float = 600) -> str:
    """Run Python ``code`` in a fresh interpreter (the repository and tests/ on its path); fail the
    test, with the child's output, unless it exits with status 0 and prints ``CHILD OK`` last.
    Returns stdout."""
    import os
    import textwrap
    from pathlib import Path

    from rmsnorm_lessons.core import child

    here = Path(__file__).resolve().parent
    path = os.pathsep.join([str(here.parent), str(here), os.environ.get("PYTHONPATH", "")])
    done = child.run(child.command(["-c", textwrap.dedent(code)]), timeout=timeout, cwd=here.parent,
                     env={"PYTHONPATH": path.rstrip(os.pathsep)})
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines or lines[-1] != "CHILD OK":
        if done.timed_out:
            status = f"did not finish within {timeout} s"
        else:
            signal = f" (killed by signal {-done.returncode})" if done.returncode < 0 else ""
            status = f"exited with status {done.returncode}{signal}"
        raise AssertionError(f"the child process {status}\n--- stdout (end) "
                             f"---\n{done.stdout[-3000:]}\n--- stderr (end) "
                             f"---\n{done.stderr[-5000:]}")
    return done.stdout
