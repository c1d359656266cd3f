"""Building a kernel for the CPU twin: g++, the runtime (``runtime/``), a cache like the GPU's.

:func:`library` turns a kernel's CUDA text into a shared library the twin loads with ctypes: the
text's refusals first (:mod:`.scan`), then g++'s preprocessor (the twin's ``cuda_bf16.h`` is found
before CUDA's), the one rewrite :func:`.scan.for_gcc` makes, an entry point per kernel
(``twin_entry_<kernel>``, which unpacks the arguments, and ``twin_sig_<kernel>``, their kinds), and
g++ with ``-fsanitize=thread`` where hazards are tracked: its calls on every load and store land in
the twin's shadow (``runtime/twin_shadow.cpp``), not in libtsan. The runtime is compiled once into
objects of its own. Libraries are kept in ``cache_dir()/twin``, keyed by the text, every file it
includes, the defines, the kernels, the flags, the runtime's sources and g++'s version, so a second
check of the same text loads at once.
"""
from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from . import _core, scan

RUNTIME = Path(__file__).resolve().parent / "runtime"
RUNTIME_SOURCES = ("twin_sched.cpp", "twin_sync.cpp", "twin_shadow.cpp", "twin_hooks.cpp",
                   "twin_trace.cpp")
#: -fno-strict-aliasing: CUDA C reads a Packed128 through an int4 and back (common.cuh)
FLAGS = ("-std=c++17", "-fPIC", "-fno-strict-aliasing", "-w", "-gdwarf-4")
#: chosen by measurement (results/twin/NOTES.md): -O1 compiles faster than -O2 and runs as fast
OPT = "-O1"
HAZARD_FLAG = "-fsanitize=thread"


class NeedsGPU(RuntimeError):
    """The kernel uses what the twin does not model; the message names it and its line."""


class TwinCompileError(RuntimeError):
    """g++ did not accept a text nvcc may well accept; :attr:`errors` are its errors, one a
    line."""

    def __init__(self, message: str, errors: list[str]):
        super().__init__(message)
        self.errors = errors


def find_cxx() -> str | None:
    """The host C++ compiler: ``$RMSNORM_TWIN_CXX``, else g++ on PATH."""
    return os.environ.get("RMSNORM_TWIN_CXX") or shutil.which("g++")


def require_cxx() -> str:
    cxx = find_cxx()
    if cxx is None:
        raise RuntimeError("the CPU twin needs g++ (apt install g++, or set RMSNORM_TWIN_CXX to a "
                           "g++ that supports -fsanitize=thread)")
    return cxx


@functools.lru_cache(maxsize=None)
def cxx_version(cxx: str) -> str:
    return subprocess.run([cxx, "--version"], capture_output=True, text=True).stdout.strip()


def _digest(*parts) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part if isinstance(part, bytes) else str(part).encode())
        h.update(b"\0")
    return h.hexdigest()[:32]


def _runtime_digest() -> str:
    files = sorted(RUNTIME.rglob("*.h")) + [RUNTIME / s for s in RUNTIME_SOURCES]
    return _digest(*(f"{f.name}\0{f.read_text()}" for f in files))


def _store(path: Path, make) -> Path:
    """``make(tmp)`` writes a file; it becomes ``path`` by a rename (no reader sees half)."""
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    make(tmp)
    os.replace(tmp, path)
    return path


def _run(cmd, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, cwd=cwd)


def runtime_objects(opt: str = OPT) -> list[Path]:
    """The runtime's objects, compiled once per runtime text, compiler and flags."""
    cxx = require_cxx()
    key = _digest(_runtime_digest(), cxx_version(cxx), FLAGS, opt)
    out = []
    for source in RUNTIME_SOURCES:
        obj = _core.cache_dir() / "twin" / f"runtime-{key}-{Path(source).stem}.o"

        def make(tmp, source=source):
            done = _run([cxx, opt, *FLAGS, "-Wall", "-c", RUNTIME / source, "-o", tmp])
            if done.returncode:
                raise RuntimeError(f"the twin's runtime did not compile:\n{done.stderr[-3000:]}")
        out.append(_store(obj, make))
    return out


_ENTRY = """
namespace twin_gen {
template <class... A, std::size_t... I>
__attribute__((no_sanitize_thread, noinline)) void call(void (*f)(A...), void** argv,
                                                        std::index_sequence<I...>) {
    f(*static_cast<std::remove_reference_t<A>*>(argv[I])...);
}
template <class... A>
__attribute__((no_sanitize_thread)) void invoke(void (*f)(A...), void** argv) {
    call(f, argv, std::index_sequence_for<A...>{});
}
template <class T> constexpr char kind() {
    return std::is_pointer_v<T> ? 'p' : std::is_floating_point_v<T> ? (sizeof(T) == 4 ? 'f' : 'd')
         : sizeof(T) == 8 ? 'l' : 'i';
}
template <class... A> const char* signature(void (*)(A...)) {
    static const char s[] = {kind<A>()..., 0};
    return s;
}
}
"""


def _entries(kernels) -> str:
    """An entry point per kernel: ``twin_entry_K(argv)`` calls K with its arguments unpacked from
    ``argv`` (not instrumented: argv is the caller's memory), ``twin_sig_K()`` says their kinds
    (``p`` pointer, ``i`` 32-bit integer, ``l`` 64-bit, ``f`` float, ``d`` double)."""
    out = [_ENTRY]
    for k in kernels:
        out.append(f'extern "C" __attribute__((no_sanitize_thread)) void twin_entry_{k}(void** a) '
                   f'{{ twin_gen::invoke({k}, a); }}\n'
                   f'extern "C" const char* twin_sig_{k}() '
                   f'{{ return twin_gen::signature({k}); }}\n')
    return "".join(out)


_GCC_LINE = re.compile(r"^(?P<file>[^:\n]+):(?P<line>\d+):(?:\d+:)? (?P<kind>error|fatal error):"
                       r" (?P<text>.*)$", re.M)
_UNDECLARED = re.compile(r"[‘'](\w+)[’'] (?:was not declared in this scope|is not a member of)")


def _errors(stderr: str, own: str) -> list[str]:
    out = []
    for m in _GCC_LINE.finditer(stderr):
        file = Path(m.group("file")).name
        where = f"line {m.group('line')}" if file == own else f"{file}:{m.group('line')}"
        out.append(f"{where}: {m.group('text')}")
    return out or [stderr.strip()[-600:]]


def _needs_gpu(stderr: str, own: str) -> str | None:
    """An undeclared CUDA name (``__something`` or ``atomic...``): what the twin lacks."""
    for m in _GCC_LINE.finditer(stderr):
        name = _UNDECLARED.search(m.group("text"))
        if name and (name.group(1).startswith("__") or name.group(1).startswith("atomic")):
            file = Path(m.group("file")).name
            where = f"line {m.group('line')}" if file == own else f"{file}:{m.group('line')}"
            return f"needs a GPU: {name.group(1)} at {where} (the CPU twin does not model it)"
    return None


@dataclass(frozen=True)
class Library:
    """A kernel built for the twin: the shared library, whether it tracks hazards, its kernels,
    and the name its text's lines are reported under."""

    path: Path
    hazards: bool
    kernels: tuple
    label: str


def library(text: str, name: str, kernels, *, defines: dict | None = None, hazards: bool = True,
            path: Path | None = None, opt: str = OPT) -> Library:
    """The twin's build of ``text`` (CUDA C; ``#include "common.cuh"`` and the other files of
    ``kernels/`` work as under nvcc) with ``defines``, exporting ``kernels``; cached on disk.
    ``path``: the file the text was read from (its folder is searched for includes first).
    Raises :class:`NeedsGPU` for a construct the twin does not model (before compiling), and
    :class:`TwinCompileError` where g++ refuses the text."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError("text must be the kernel's CUDA C source")
    kernels = tuple(kernels)
    bad = [k for k in kernels if not isinstance(k, str) or not k.isidentifier()]
    if not kernels or bad:
        raise ValueError(f"kernels must name the entry points (identifiers), got {kernels!r}")
    label = scan._label(text, Path(path).name if path else name)[0]
    includes = _core.included_files(text, path)
    found = scan.refusals(text, label, includes)
    if found:
        raise NeedsGPU("; ".join(r.sentence(label) for r in found))
    cxx = require_cxx()
    flags = (opt, *FLAGS, *((HAZARD_FLAG,) if hazards else ()))
    key = _digest(text, sorted(includes.items()), sorted((defines or {}).items()), kernels, flags,
                  _runtime_digest(), cxx_version(cxx), Path(scan.__file__).read_text(), _ENTRY)
    target = _core.cache_dir() / "twin" / f"{name}-{key}.so"
    if not target.is_file():
        objects = runtime_objects(opt)
        _store(target, lambda tmp: _build(cxx, text, name, label, kernels, defines or {}, flags,
                                          path, objects, tmp))
    return Library(target, hazards, kernels, label)


def _build(cxx, text, name, label, kernels, defines, flags, path, objects, out: Path) -> None:
    include = RUNTIME / "include"
    dirs = [include, *(([Path(path).parent]) if path else []), _core.build.kernel_dir()]
    with tempfile.TemporaryDirectory(prefix="rmsnorm-twin-") as tmp:
        source = Path(path) if path else Path(tmp) / f"{name}.cu"
        if not path:
            source.write_text(text)
        pre = _run([cxx, "-E", "-std=c++17", f"-D__shared__={scan.SHARED_MARK}",
                    *(f"-D{k}={v}" for k, v in sorted(defines.items())),
                    "-include", include / "cuda_twin.h", *(f"-I{d}" for d in dirs),
                    "-x", "c++", source])
        if pre.returncode:
            _refuse(pre.stderr, label)
        unit = Path(tmp) / f"{name}.twin.cpp"
        unit.write_text(scan.for_gcc(pre.stdout) + _entries(kernels))
        obj = Path(tmp) / f"{name}.o"
        done = _run([cxx, *flags, "-c", unit, "-o", obj], cwd=tmp)
        if done.returncode:
            _refuse(done.stderr, label)
        done = _run([cxx, "-shared", obj, *objects, "-ldl", "-o", out], cwd=tmp)
        if done.returncode:
            raise TwinCompileError(f"linking the twin's build of {name} failed:\n"
                                   f"{done.stderr[-2000:]}", _errors(done.stderr, label))


def _refuse(stderr: str, label: str):
    gpu_only = _needs_gpu(stderr, label)
    if gpu_only:
        raise NeedsGPU(gpu_only)
    errors = _errors(stderr, label)
    raise TwinCompileError("g++ (the CPU twin's compiler) does not accept it: "
                           + "; ".join(errors[:4]), errors)
