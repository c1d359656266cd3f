"""Building the kernels of ``kernels/``: one place for the compiler, its options and its reports.

* :func:`compile_file` (a version or a file of ``kernels/``) and :func:`compile_source` (a text) run
  nvcc for any target (``sm_80``, ``sm_90``...) and need no GPU: they return the cubin or PTX and
  the ptxas resource report parsed into :class:`Resources` records. Both are cached on disk
  (:func:`cache_dir`), so a second process (a second test run) does not compile the same text again.
* :func:`source_module` loads the same cubin, built for the current device, as a PyCUDA module.
* The target (default: the device): :func:`use_target` or ``RMSNORM_ARCH=compute_75`` builds every
  rung as PTX for a virtual architecture, JIT-compiled by the driver, and :func:`target_facts` gives
  plans its limits with the device's SM count: an H200 runs the code paths of a T4 or an A100. The
  switch is kept in :mod:`rmsnorm_lessons.core.devices` (the ladder's plans read it without
  building).
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

from . import devices, gpu, ladder

# the target switch lives in devices, which plans read too: build re-exports it
from .devices import ARCH_ENV, check_target, target_arch, use_target  # noqa: F401
from .ptxas import Resources, parse_ptxas  # noqa: F401  (both stay importable from build)

#: flags of every build: the seed's (-O3 --use_fast_math), C++17, line info for the SASS listings
NVCC_FLAGS = ("-O3", "--use_fast_math", "-std=c++17", "-lineinfo")
DEFAULT_ARCH = "sm_90"


KERNEL_PACKAGE = "rmsnorm_lessons.kernel_sources"  # the wheel ships kernels/ under this name


@functools.lru_cache(maxsize=None)
def _shipped_kernel_dir() -> Path:
    # an installed wheel (or an editable install) maps kernels/ to KERNEL_PACKAGE; a checkout on
    # PYTHONPATH has it beside the package
    # kernel_sources has no __init__.py: a namespace package, whose files() is a MultiplexedPath
    # (its str() is not a path), so ask the import system for its folders
    try:
        spec = importlib.util.find_spec(KERNEL_PACKAGE)
    except ModuleNotFoundError:
        spec = None
    for folder in (spec.submodule_search_locations or []) if spec else []:
        if (Path(folder) / "common.cuh").is_file():
            return Path(folder)
    return Path(__file__).resolve().parents[2] / "kernels"


def kernel_dir() -> Path:
    """The folder holding the ``.cu`` files (``$RMSNORM_LESSONS_KERNELS`` overrides)."""
    override = os.environ.get("RMSNORM_LESSONS_KERNELS")
    return Path(override) if override else _shipped_kernel_dir()


def shown_path(path: Path) -> str:
    """``path`` as a message shows it: relative to the checkout (``kernels/v1_naive.cu``) or, in an
    installed package, to the folder holding it (the package's ``kernel_sources/<name>.cu``),
    never a site-packages path; a path elsewhere ($RMSNORM_LESSONS_KERNELS) as it is."""
    path = Path(path).resolve()
    root = Path(__file__).resolve().parent.parent.parent  # the checkout, or site-packages
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return str(path)


def kernel_path(name: str) -> Path:
    """``kernels/<name>.cu`` (``name`` may carry the suffix); a clear error if it does not exist."""
    file = kernel_dir() / (name if name.endswith((".cu", ".cuh")) else name + ".cu")
    if not file.is_file():
        known = ", ".join(sorted(p.stem for p in kernel_dir().glob("*.cu")))
        raise FileNotFoundError(f"no kernel file {shown_path(file)}; known: {known}")
    return file


def kernel_source(name: str) -> str:
    return kernel_path(name).read_text()


def find_tool(tool: str) -> str | None:
    """Path of a CUDA tool (``nvcc``, ``cuobjdump``, ``nvdisasm``, ``compute-sanitizer``): PATH
    first, then NVIDIA's ``cuda-pathfinder`` (pip wheels in any site-packages, a conda prefix,
    CUDA_PATH/CUDA_HOME), then ``/usr/local/cuda/bin``."""
    if found := shutil.which(tool):
        return found
    try:
        # a dependency; lazy: most calls stop at PATH
        from cuda.pathfinder import find_nvidia_binary_utility
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
            "install CUDA 13 or run `make test`, which installs the nvidia-cuda-nvcc wheels into "
            ".venv"
        )
    return nvcc


@functools.lru_cache(maxsize=None)
def nvcc_version(nvcc: str | None = None) -> str | None:
    if not (nvcc := nvcc or find_nvcc()):
        return None
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
    m = re.search(r"release ([\d.]+), V([\d.]+)", out)
    return m.group(2) if m else out.strip().splitlines()[-1]


def _include_dirs() -> list[str]:
    dirs = [str(kernel_dir().resolve())]
    nvcc = find_nvcc()
    if nvcc:  # a wheel-installed nvcc keeps cuda_bf16.h beside it, outside the default search path
        inc = Path(nvcc).resolve().parent.parent / "include"
        if inc.is_dir():
            dirs.append(str(inc))
    return dirs


@dataclass(frozen=True)
class Compiled:
    name: str
    arch: str
    kind: str  # "cubin" or "ptx"
    binary: bytes
    resources: dict[str, Resources]
    log: str


def _check_arch(arch: str, kind: str = "cubin") -> str:
    if kind == "ptx" and re.fullmatch(r"compute_\d{2,3}a?", str(arch)):
        return arch
    if not re.fullmatch(r"sm_\d{2,3}a?", str(arch)):
        virtual = " (or 'compute_75' for PTX)" if kind == "ptx" else ""
        raise ValueError(f"arch must look like 'sm_90' or 'sm_80'{virtual}, got {arch!r}")
    return arch


def target_facts(device=None):
    """The facts plans read: ``device`` (default: this GPU) as the target architecture has them
    (:func:`devices.facts_for_target`: its limits, the device's SM count)."""
    return devices.facts_for_target(device if device is not None else gpu.facts())


_NVCC_LINE = re.compile(r"^(?P<file>[^\s(]+)\((?P<line>\d+)\): "
                        r"(?P<kind>error|warning)\b:?\s*(?P<text>.*)$")


class CompileError(RuntimeError):
    """nvcc refused a source. The message's first line says what was compiled (``nvcc failed for
    NAME (ARCH):``), the rest is nvcc's own report; :meth:`errors` and :meth:`summary` read it."""

    @property
    def headline(self) -> str:
        lines = [line.strip() for line in str(self).splitlines() if line.strip()]
        return lines[0].rstrip(":") if lines else type(self).__name__

    def errors(self, stem: str | None = None) -> list[str]:
        """nvcc's errors, one a line: ``line 12: ...`` in the file named ``stem`` (a learner's text,
        which the harness names with ``#line 1 "stem"``), ``file(12): ...`` elsewhere; lines that
        say "error" without a place (nvcc fatal, ptxas) as they are."""
        out = []
        for raw in str(self).splitlines()[1:]:
            m = _NVCC_LINE.match(raw.strip())
            if m and m.group("kind") == "error":
                file = Path(m.group("file")).name
                where = f"line {m.group('line')}" if file == stem else f"{file}({m.group('line')})"
                out.append(f"{where}: {m.group('text')}")
            elif not m and re.search(r"error|fatal", raw,
                                     re.I) and not re.search(r"errors? detected", raw):
                out.append(raw.strip())
        return out

    def summary(self, keep: int = 8, stem: str | None = None, sep: str = "\n  ") -> str:
        """The first ``keep`` :meth:`errors` joined by ``sep`` (nvcc's last 800 characters where
        none is found)."""
        return sep.join(self.errors(stem)[:keep]) or str(self).strip()[-800:]

    def first(self, stem: str | None = None) -> str:
        """One line: what failed and nvcc's first error."""
        errors = self.errors(stem)
        return self.headline + (f": {errors[0]}" if errors else "")


def _rung(name):
    """The rung called ``name`` (or ``name`` itself when it is a Rung), else None: a file."""
    if isinstance(name, ladder.Rung):
        return name
    try:
        return ladder.get(name)
    except (ValueError, TypeError):
        return None


def _define_flags(defines: dict) -> tuple:
    return tuple(f"-D{k}={v}" for k, v in sorted(defines.items()))


def kernel_text(name) -> tuple[str, str, dict]:
    """``(file stem, CUDA text, defines)`` of a version or of a file of ``kernels/``."""
    rung = _rung(name)
    if rung is not None and rung.source is not None:
        return rung.name, rung.source, rung.defines
    stem = rung.stem if rung is not None else str(name)
    return kernel_path(stem).stem, kernel_source(stem), (rung.defines if rung is not None else {})


def compile_file(name, arch: str = DEFAULT_ARCH, kind: str = "cubin", extra_flags=()) -> Compiled:
    """Compile a version (its ``kernels/<name>.cu``, or a registered rung's source, with its
    defines) or any file of ``kernels/`` with nvcc for ``arch``; no GPU needed.

    ``kind`` is ``"cubin"`` (machine code, with the ptxas resource report) or ``"ptx"``. Results are
    cached in this process and on disk (:func:`cache_dir`), keyed by the text, every included file,
    the options, the arch and nvcc's version.
    """
    _check_kind(kind)
    rung = _rung(name)
    if rung is not None and rung.source is not None:
        return compile_source(rung.source, arch, kind, name=rung.name, defines=rung.defines,
                              extra_flags=extra_flags)
    path = kernel_path(rung.stem if rung is not None else name)
    flags = _define_flags(rung.defines if rung is not None else {}) + tuple(extra_flags)
    return _compile(path.read_text(), path.stem, _check_arch(arch, kind), kind, flags, path)


def resources(name, arch: str = DEFAULT_ARCH) -> dict[str, Resources]:
    """The ptxas report of every kernel of a version or of ``kernels/<name>.cu`` for ``arch``."""
    return compile_file(name, arch).resources


def source_module(name, arch: str | None = None, defines: dict | None = None):
    """A version (or a file of ``kernels/``) compiled with PyCUDA's ``SourceModule`` for this GPU
    (or ``arch``); kept in this process by its text, defines and every file it includes (PyCUDA
    keeps the cubin on disk). A virtual ``arch`` (default: :func:`target_arch`) is built as PTX
    and JIT-compiled by the driver."""
    gpu.require()
    stem, text, own = kernel_text(name)
    merged = {**own, **(defines or {})}
    rung = _rung(name)
    here = None if rung is not None and rung.source is not None else kernel_path(stem)
    arch = arch or target_arch()
    if arch is not None and arch.startswith("compute_"):
        ptx = _compile(text, stem, check_target(arch), "ptx", _define_flags(merged), here)
        return _ptx_module(ptx.binary)
    includes = hashlib.sha256(repr(sorted(included_files(text, here).items())).encode())
    return _module_cache((stem, text, arch, tuple(sorted(merged.items())), includes.hexdigest()))


@functools.lru_cache(maxsize=64)
def _module_cache(key):
    from pycuda.compiler import (
        SourceModule,  # PyCUDA loads libcuda: only where a GPU is used
    )

    stem, text, arch, defines, digest = key
    source = f"// includes {digest}\n" + text  # PyCUDA's disk cache is keyed by the text alone
    options = list(NVCC_FLAGS) + list(_define_flags(dict(defines)))
    try:
        return SourceModule(source, nvcc=require_nvcc(), options=options, no_extern_c=True,
                            arch=arch, include_dirs=_include_dirs())
    except Exception as exc:  # pycuda.driver.CompileError, without importing pycuda.driver here
        if type(exc).__name__ == "CompileError":
            where = arch or gpu.facts().arch
            raise CompileError(f"nvcc failed for {stem} ({where}):\n"
                               f"{getattr(exc, 'stderr', '') or exc}") from exc
        raise


@functools.lru_cache(maxsize=64)
def _ptx_module(ptx: bytes):  # the driver reads PTX up to a terminating NUL
    return gpu.driver().module_from_buffer(ptx if ptx.endswith(b"\0") else ptx + b"\0")


def clear_module_cache() -> None:
    """Forget loaded modules (they belong to a context; call before the context goes away)."""
    _module_cache.cache_clear()
    _ptx_module.cache_clear()


gpu.on_shutdown(clear_module_cache)


def compile_source(source: str, arch: str = DEFAULT_ARCH, kind: str = "cubin", name: str = "inline",
                   defines: dict | None = None, extra_flags=()) -> Compiled:
    """Compile CUDA C held in a string with nvcc, as :func:`compile_file` does a file; no GPU
    needed.

    ``kernels/`` is on the include path, so ``#include "common.cuh"`` works. Raises
    :class:`CompileError` with nvcc's messages when the source does not compile. Cached as
    :func:`compile_file` is.
    """
    _check_kind(kind)
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise ValueError(f"name must be a plain file stem, got {name!r}")
    flags = _define_flags(defines or {}) + tuple(extra_flags)
    return _compile(source, name, _check_arch(arch, kind), kind, flags, None)


def _check_kind(kind: str) -> None:
    if kind not in ("cubin", "ptx"):
        raise ValueError(f"kind must be 'cubin' or 'ptx', got {kind!r}")


# --- the compile caches: in this process, and on disk across processes
# ------------------------------

_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.M)


def cache_dir() -> Path:
    """Where compiled cubins and PTX are kept across processes: ``$RMSNORM_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/rmsnorm-lessons`` (``~/.cache/rmsnorm-lessons``)."""
    if override := os.environ.get("RMSNORM_CACHE_DIR"):
        return Path(override).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "rmsnorm-lessons"


def included_files(text: str, path: Path | None = None) -> dict[str, str]:
    """Every file ``text`` includes with ``#include "..."``, followed recursively (found beside the
    file that includes it, else on the include path), as ``{path: text}``; an include not found is
    listed with an empty text (nvcc will say so). ``#if`` is not evaluated: a superset of what nvcc
    reads."""
    found: dict[str, str] = {}
    todo = [(text, path.parent if path is not None else None)]
    dirs = [Path(d) for d in _include_dirs()]
    while todo:
        current, here = todo.pop()
        for name in _INCLUDE.findall(current):
            candidates = ([here / name] if here is not None else []) + [d / name for d in dirs]
            hit = next((c.resolve() for c in candidates if c.is_file()), None)
            key = str(hit) if hit is not None else f"<missing> {name}"
            if key in found:
                continue
            found[key] = hit.read_text(errors="replace") if hit is not None else ""
            if hit is not None:
                todo.append((found[key], hit.parent))
    return found


def _cache_key(text: str, path: Path | None, arch: str, kind: str, flags: tuple) -> str:
    nvcc = require_nvcc()
    h = hashlib.sha256()
    for part in (text, arch, kind, repr(NVCC_FLAGS), repr(flags), nvcc, str(nvcc_version(nvcc))):
        h.update(part.encode())
        h.update(b"\0")
    for name, included in sorted(included_files(text, path).items()):
        h.update(f"{Path(name).name}\0{included}\0".encode())
    return h.hexdigest()[:32]


def disk_cached(folder: str, key: str, make) -> bytes:
    """``make()`` (bytes), kept in :func:`cache_dir` ``/folder/key`` for the next process; a
    cache that cannot be written is skipped."""
    file = cache_dir() / folder / key
    try:
        return file.read_bytes()
    except OSError:
        pass
    data = make()
    _store(file, data)
    return data


def _store(file: Path, data: bytes) -> None:
    try:  # written aside, then renamed: a reader never sees half a file
        file.parent.mkdir(parents=True, exist_ok=True)
        tmp = file.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, file)
    except OSError:  # a read-only home: doing the work again next time is the only cost
        pass


def _compile(text: str, name: str, arch: str, kind: str, flags: tuple,
             path: Path | None) -> Compiled:
    key = _cache_key(text, path, arch, kind, flags)
    return _compile_keyed(key, text, name, arch, kind, flags,
                          str(path) if path is not None else None)


@functools.lru_cache(maxsize=128)
def _compile_keyed(key, text, name, arch, kind, flags, path) -> Compiled:
    disk = cache_dir() / "nvcc"
    binary_file, log_file = disk / f"{key}.{kind}", disk / f"{key}.log"
    try:
        log = log_file.read_text()
        return Compiled(name, arch, kind, binary_file.read_bytes(), parse_ptxas(log), log)
    except OSError:
        pass
    compiled = _run_nvcc(text, name, arch, kind, flags, path)
    _store(log_file, compiled.log.encode())  # the log first: whoever finds the binary finds both
    _store(binary_file, compiled.binary)
    return compiled


def _run_nvcc(text, name, arch, kind, flags, path) -> Compiled:
    nvcc = require_nvcc()
    label = name if path is None else Path(path).name  # a file of kernels/ is named with its suffix
    with tempfile.TemporaryDirectory(prefix="rmsnorm-lessons-") as tmp:
        if path is None:
            path = Path(tmp) / f"{name}.cu"
            path.write_text(text)
        path = Path(path).resolve()
        out = Path(tmp) / f"{name}.{kind}"
        report = ["-Xptxas", "-v"] if kind == "cubin" else []
        cmd = [nvcc, f"-{kind}", f"-arch={arch}", *NVCC_FLAGS, *flags, *report,
               *[f"-I{d}" for d in _include_dirs()], "-o", str(out), str(path)]
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp)
        if proc.returncode != 0:
            raise CompileError(f"nvcc failed for {label} ({arch}):\n{proc.stderr}")
        log = proc.stdout + proc.stderr
        return Compiled(name, arch, kind, out.read_bytes(), parse_ptxas(log), log)
