"""Building the kernels of ``kernels/``: one place for the compiler, its options and its reports.

Two paths share the same options:

* :func:`source_module` compiles a file with PyCUDA's ``SourceModule`` for the current device
  (needs a GPU); PyCUDA caches the cubin on disk.
* :func:`compile_file` runs nvcc directly for any target (``sm_80``, ``sm_90``...) and needs no GPU: it
  returns the cubin or PTX and the ptxas resource report parsed into :class:`Resources` records.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from . import gpu, ladder

#: flags of every build: the seed's (-O3 --use_fast_math), C++17, line info for the SASS listings
NVCC_FLAGS = ("-O3", "--use_fast_math", "-std=c++17", "-lineinfo")
DEFAULT_ARCH = "sm_90"


KERNEL_PACKAGE = "rmsnorm_lessons.kernel_sources"  # the wheel ships kernels/ under this name


@functools.lru_cache(maxsize=None)
def _shipped_kernel_dir() -> Path:
    # an installed wheel (or an editable install) maps kernels/ to KERNEL_PACKAGE; a checkout on
    # PYTHONPATH has it beside the package
    # kernel_sources has no __init__.py: a namespace package, whose files() is a MultiplexedPath (its
    # str() is not a path), so ask the import system for its folders
    try:
        spec = importlib.util.find_spec(KERNEL_PACKAGE)
    except ModuleNotFoundError:
        spec = None
    for folder in (spec.submodule_search_locations or []) if spec else []:
        if (Path(folder) / "common.cuh").is_file():
            return Path(folder)
    return Path(__file__).resolve().parent.parent / "kernels"


def kernel_dir() -> Path:
    """The folder holding the ``.cu`` files (``$RMSNORM_LESSONS_KERNELS`` overrides)."""
    override = os.environ.get("RMSNORM_LESSONS_KERNELS")
    if override:
        return Path(override)
    return _shipped_kernel_dir()


def kernel_path(name: str) -> Path:
    """``kernels/<name>.cu`` (``name`` may carry the suffix); a clear error if it does not exist."""
    file = kernel_dir() / (name if name.endswith((".cu", ".cuh")) else name + ".cu")
    if not file.is_file():
        known = ", ".join(sorted(p.stem for p in kernel_dir().glob("*.cu")))
        raise FileNotFoundError(f"no kernel file {file}; known: {known}")
    return file


def kernel_source(name: str) -> str:
    return kernel_path(name).read_text()


def _header_digest() -> str:
    # PyCUDA's cache keys on the source text and options only; a change to a header must still
    # force a rebuild, so every source handed to it carries the digest of the headers.
    h = hashlib.sha1()
    for header in sorted(kernel_dir().glob("*.cuh")):
        h.update(header.read_bytes())
    return h.hexdigest()[:16]


def find_tool(tool: str) -> str | None:
    """Path of a CUDA tool (``nvcc``, ``cuobjdump``, ``nvdisasm``, ``compute-sanitizer``): PATH first, then
    NVIDIA's ``cuda-pathfinder`` (pip wheels in any site-packages, a conda prefix, CUDA_PATH/CUDA_HOME),
    then ``/usr/local/cuda/bin``."""
    found = shutil.which(tool)
    if found:
        return found
    try:
        from cuda.pathfinder import find_nvidia_binary_utility  # a dependency; lazy: most calls stop at PATH
    except ImportError:
        find_nvidia_binary_utility = None
    if find_nvidia_binary_utility is not None:
        try:
            found = find_nvidia_binary_utility(tool)
        except Exception:  # a tool it does not know: fall through to the last place to look
            found = None
        if found:
            return found
    candidate = Path("/usr/local/cuda/bin") / tool
    return str(candidate) if candidate.is_file() and os.access(candidate, os.X_OK) else None


def find_nvcc() -> str | None:
    return find_tool("nvcc")


def require_nvcc() -> str:
    nvcc = find_nvcc()
    if nvcc is None:
        raise RuntimeError(
            "nvcc was not found on PATH, under CUDA_HOME or in NVIDIA's pip wheels; "
            "install CUDA 13 or run `make test`, which installs the nvidia-cuda-nvcc wheels into .venv"
        )
    return nvcc


@functools.lru_cache(maxsize=None)
def nvcc_version(nvcc: str | None = None) -> str | None:
    nvcc = nvcc or find_nvcc()
    if not nvcc:
        return None
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
    m = re.search(r"release ([\d.]+), V([\d.]+)", out)
    return m.group(2) if m else out.strip().splitlines()[-1]


def _include_dirs() -> list[str]:
    dirs = [str(kernel_dir())]
    nvcc = find_nvcc()
    if nvcc:  # a wheel-installed nvcc keeps cuda_bf16.h beside it, outside the default search path
        inc = Path(nvcc).resolve().parent.parent / "include"
        if inc.is_dir():
            dirs.append(str(inc))
    return dirs


@dataclass(frozen=True)
class Resources:
    """What ptxas reports for one kernel (``-Xptxas -v``)."""

    kernel: str
    arch: str
    registers: int
    shared_bytes: int  # static shared memory; dynamic shared memory is chosen at launch
    stack_bytes: int
    spill_stores: int
    spill_loads: int
    barriers: int
    constant_bytes: int

    @property
    def spills(self) -> bool:
        return self.spill_stores > 0 or self.spill_loads > 0


_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(\w+)'")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_BARRIERS = re.compile(r"used (\d+) barriers")
_SMEM = re.compile(r"(\d+) bytes smem")
_CMEM = re.compile(r"(\d+) bytes cmem\[0\]")


def parse_ptxas(log: str) -> dict[str, Resources]:
    """Parse ``ptxas -v`` output into one :class:`Resources` per entry function."""
    found: dict[str, Resources] = {}
    current = None
    fields: dict = {}
    for line in log.splitlines():
        m = _ENTRY.search(line)
        if m:
            current = m.group(1)
            fields = dict(kernel=current, arch=m.group(2), registers=0, shared_bytes=0, stack_bytes=0,
                          spill_stores=0, spill_loads=0, barriers=0, constant_bytes=0)
            continue
        if current is None:
            continue
        m = _FRAME.search(line)
        if m:
            fields.update(stack_bytes=int(m.group(1)), spill_stores=int(m.group(2)),
                          spill_loads=int(m.group(3)))
        m = _USED.search(line)
        if m:
            fields["registers"] = int(m.group(1))
            for pattern, key in ((_BARRIERS, "barriers"), (_SMEM, "shared_bytes"), (_CMEM, "constant_bytes")):
                mm = pattern.search(line)
                if mm:
                    fields[key] = int(mm.group(1))
            found[current] = Resources(**fields)
            current = None
    return found


@dataclass(frozen=True)
class Compiled:
    name: str
    arch: str
    kind: str  # "cubin" or "ptx"
    binary: bytes
    resources: dict[str, Resources]
    log: str


def _check_arch(arch: str) -> str:
    if not re.fullmatch(r"sm_\d{2,3}a?", arch):
        raise ValueError(f"arch must look like 'sm_90' or 'sm_80', got {arch!r}")
    return arch


@functools.lru_cache(maxsize=64)
def _compile_cached(path: str, mtime_key: str, arch: str, kind: str, extra: tuple) -> Compiled:
    nvcc = require_nvcc()
    with tempfile.TemporaryDirectory(prefix="rmsnorm-lessons-") as tmp:
        out = Path(tmp) / f"kernel.{kind}"
        cmd = [nvcc, f"-{kind}", f"-arch={arch}", *NVCC_FLAGS, *extra, "-Xptxas", "-v",
               *[f"-I{d}" for d in _include_dirs()], "-o", str(out), path]
        if kind == "ptx":
            cmd.remove("-Xptxas")
            cmd.remove("-v")
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise CompileError(f"nvcc failed for {Path(path).name} ({arch}):\n{proc.stderr}")
        log = proc.stdout + proc.stderr
        return Compiled(Path(path).stem, arch, kind, out.read_bytes(), parse_ptxas(log), log)


class CompileError(RuntimeError):
    pass


def _rung(name):
    """The registered rung called ``name`` (or ``name`` itself when it is a Rung), else None: a plain file."""
    if isinstance(name, ladder.Rung):
        return name
    try:
        return ladder.get(name)
    except (ValueError, TypeError):
        return None


def _define_flags(defines: dict) -> tuple:
    return tuple(f"-D{k}={v}" for k, v in sorted(defines.items()))


def kernel_text(name) -> tuple[str, str, dict]:
    """``(file stem, CUDA text, defines)`` of a version (shipped or registered) or of a file of ``kernels/``."""
    rung = _rung(name)
    if rung is not None and rung.source is not None:
        return rung.name, rung.source, rung.defines
    stem = rung.stem if rung is not None else str(name)
    return kernel_path(stem).stem, kernel_source(stem), (rung.defines if rung is not None else {})


def compile_file(name, arch: str = DEFAULT_ARCH, kind: str = "cubin", extra_flags=()) -> Compiled:
    """Compile a version (its ``kernels/<name>.cu``, or a registered rung's source, with its defines) or
    any file of ``kernels/`` with nvcc for ``arch``; no GPU needed.

    ``kind`` is ``"cubin"`` (machine code, with the ptxas resource report) or ``"ptx"``.
    """
    if kind not in ("cubin", "ptx"):
        raise ValueError(f"kind must be 'cubin' or 'ptx', got {kind!r}")
    rung = _rung(name)
    if rung is not None and rung.source is not None:
        return compile_source(rung.source, arch, kind, name=rung.name, defines=rung.defines,
                              extra_flags=extra_flags)
    path = kernel_path(rung.stem if rung is not None else name)
    flags = _define_flags(rung.defines if rung is not None else {}) + tuple(extra_flags)
    stamp = f"{path.stat().st_mtime_ns}:{_header_digest()}"
    return _compile_cached(str(path), stamp, _check_arch(arch), kind, flags)


def resources(name, arch: str = DEFAULT_ARCH) -> dict[str, Resources]:
    """The ptxas report of every kernel of a version or of ``kernels/<name>.cu`` for ``arch``."""
    return compile_file(name, arch).resources


def source_module(name, arch: str | None = None, defines: dict | None = None):
    """Compile a version (or a file of ``kernels/``) with PyCUDA's ``SourceModule`` on the current device,
    cached by its text, defines and headers."""
    gpu.require()
    stem, text, own = kernel_text(name)
    merged = {**own, **(defines or {})}
    return _module_cache((stem, text, arch, tuple(sorted(merged.items())), _header_digest()))


@functools.lru_cache(maxsize=64)
def _module_cache(key):
    from pycuda.compiler import SourceModule  # PyCUDA loads libcuda: only where a GPU is used

    stem, text, arch, defines, digest = key
    source = f"// headers {digest}\n" + text
    options = list(NVCC_FLAGS) + list(_define_flags(dict(defines)))
    try:
        return SourceModule(source, nvcc=require_nvcc(), options=options, no_extern_c=True, arch=arch,
                            include_dirs=_include_dirs())
    except Exception as exc:  # pycuda.driver.CompileError, without importing pycuda.driver here
        if type(exc).__name__ == "CompileError":
            raise CompileError(f"nvcc failed for {stem}:\n{getattr(exc, 'stderr', '') or exc}") from exc
        raise


def clear_module_cache() -> None:
    """Forget compiled modules (they belong to a context; call before the context goes away)."""
    _module_cache.cache_clear()


gpu.on_shutdown(clear_module_cache)


# --- compiling a source string (lesson 03's exercise; any inline kernel) ----------------------------


@functools.lru_cache(maxsize=32)
def _compile_source_cached(source: str, arch: str, kind: str, name: str, digest: str, flags: tuple) -> Compiled:
    nvcc = require_nvcc()
    with tempfile.TemporaryDirectory(prefix="rmsnorm-lessons-") as tmp:
        path = Path(tmp) / f"{name}.cu"
        path.write_text(source)
        out = Path(tmp) / f"{name}.{kind}"
        report = ["-Xptxas", "-v"] if kind == "cubin" else []
        cmd = [nvcc, f"-{kind}", f"-arch={arch}", *NVCC_FLAGS, *flags, *report,
               *[f"-I{d}" for d in _include_dirs()], "-o", str(out), str(path)]
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp)
        if proc.returncode != 0:
            raise CompileError(f"nvcc failed for {name} ({arch}):\n{proc.stderr}")
        log = proc.stdout + proc.stderr
        return Compiled(name, arch, kind, out.read_bytes(), parse_ptxas(log), log)


def compile_source(source: str, arch: str = DEFAULT_ARCH, kind: str = "cubin", name: str = "inline",
                   defines: dict | None = None, extra_flags=()) -> Compiled:
    """Compile CUDA C held in a string with nvcc, as :func:`compile_file` does a file; no GPU needed.

    ``kernels/`` is on the include path, so ``#include "common.cuh"`` works. Raises :class:`CompileError`
    with nvcc's messages when the source does not compile. Results are cached by the source text.
    """
    if kind not in ("cubin", "ptx"):
        raise ValueError(f"kind must be 'cubin' or 'ptx', got {kind!r}")
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise ValueError(f"name must be a plain file stem, got {name!r}")
    flags = _define_flags(defines or {}) + tuple(extra_flags)
    return _compile_source_cached(source, _check_arch(arch), kind, name, _header_digest(), flags)
