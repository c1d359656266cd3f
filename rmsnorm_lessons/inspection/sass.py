"""What the compiler made of a kernel, without a GPU: ptxas resources, PTX, and SASS with marks.

SASS is the machine code the GPU runs. Reading all of it is not the point; a handful of instructions
tell whether an optimisation happened:

========================  ==================================================================
``LDG.E.128``/``STG.E.128``  one 128-bit global load/store per thread (``Packed128``); ``LDG.E``
                          alone is 32 bits. Hints ride along: ``EF`` evict-first (``__ldcs``),
                          ``STRONG.GPU`` coherent in L2 (``volatile``, ``__stcg``), ``CONSTANT``
                          the read-only path (``__ldg``)
``SHFL.BFLY``             a warp shuffle (``__shfl_xor_sync``): registers of another lane
``ATOMS``                 an atomic on shared memory (``atomicAdd`` on ``__shared__``)
``ATOMG``/``ATOM``        an atomic on global memory that returns the old value (``atomicInc``)
``RED``/``REDG``          an atomic on global memory whose result is unused (``atomicAdd`` alone)
``BAR.SYNC``              a block barrier (``__syncthreads``)
``MEMBAR``/``FENCE``      a memory fence (``__threadfence``)
``LDL``/``STL``           local memory: registers spilled to (cached) device memory
========================  ==================================================================

``sass(name)`` gives the listing with those lines tagged (``<< 128-bit load``), ``count(name)`` the
numbers, ``report(name)`` the resources and the numbers in a few lines
(:func:`rmsnorm_lessons.inspection.occupancy.report` adds the launch and the occupancy at a width
C). ``name`` is a version of the ladder (its name or its :class:`~rmsnorm_lessons.core.ladder.Rung`,
a learner's registered rung too) or any file of ``kernels/``. SASS comes from ``nvdisasm -json``
(the disassembly as JSON, read by :func:`parse_sass`); CUDA ships nvdisasm, and without a CUDA
install NVIDIA's pip wheel
``nvidia-cuda-nvdisasm`` provides it (``make test`` installs it).
"""
from __future__ import annotations

import functools
import hashlib
import re
import subprocess
import tempfile
from pathlib import Path

from ..core import build, ladder
from .sass_parse import (  # noqa: F401
    COUNT_KEYS,
    Function,
    Instruction,
    Listing,
    _text,  # noqa: F401 (tests read an instruction's text with it)
    classify,
    parse_sass,
)

DEFAULT_ARCH = build.DEFAULT_ARCH


class ToolMissing(RuntimeError):
    """nvdisasm, the CUDA binary tool that disassembles a cubin, is not installed (or is too old for
    ``-json``); the message says how to get it."""


_HOW_TO_GET = (
    "It ships with the CUDA toolkit (put its bin/ on PATH or set CUDA_HOME); without a toolkit, "
    "`pip install nvidia-cuda-nvdisasm` installs it (`make test` and tools/setup-venv.sh put it "
    "into .venv). Registers, shared memory and PTX need only nvcc."
)


def resolve(name):
    """What :mod:`~rmsnorm_lessons.core.build` compiles for ``name``: a version's
    :class:`~rmsnorm_lessons.core.ladder.Rung` (given by name or itself), else the name of a file of
    ``kernels/``; FileNotFoundError (listing the files) for anything else."""
    if isinstance(name, ladder.Rung):
        return name
    try:
        return ladder.get(name)
    # not a version: a file of kernels/ (timing, rmsnorm_forward, ...)
    except (TypeError, ValueError):
        build.kernel_path(name)  # a clear FileNotFoundError listing the known files
        return name


def _label(target) -> str:
    return getattr(target, "name", target)


# --------------------------------------------------------------------------------------------------
# PTX and resources


def resources(name, arch: str = DEFAULT_ARCH) -> dict:
    """ptxas's report of every kernel in the file: ``{kernel: Resources}`` (no GPU needed)."""
    return build.compile_file(resolve(name), arch).resources


def ptx(name, arch: str = DEFAULT_ARCH) -> str:
    """The PTX of a version or of ``kernels/<name>.cu``: the virtual instruction set that nvcc hands
    to ptxas."""
    return build.compile_file(resolve(name), arch, kind="ptx").binary.decode()


def max_threads_per_block(name, kernel: str, arch: str = DEFAULT_ARCH) -> int | None:
    """The block size a kernel's ``__launch_bounds__`` allows (PTX ``.maxntid``), or None if
    unbounded."""
    text = ptx(name, arch)
    m = re.search(r"\.entry\s+" + re.escape(kernel) + r"\s*\((?:[^()]|\([^()]*\))*\)\s*(.*?)\{",
                  text, re.S)
    if not m:
        raise ValueError(f"no kernel {kernel!r} in the PTX of {_label(resolve(name))} ({arch})")
    bounds = re.search(r"\.maxntid\s+(\d+)\s*,\s*(\d+)\s*,\s*(\d+)", m.group(1))
    if not bounds:
        return None
    x, y, z = (int(g) for g in bounds.groups())
    return x * y * z


# --------------------------------------------------------------------------------------------------
# SASS


def _nvdisasm(binary: bytes, *options: str) -> str:
    """``nvdisasm <options> <cubin>``: what it prints, or ToolMissing / RuntimeError saying why
    not."""
    nvdisasm = build.find_tool("nvdisasm")
    if nvdisasm is None:
        raise ToolMissing("nvdisasm was not found on PATH, under CUDA_HOME or in NVIDIA's pip "
                          f"wheels, so there is no SASS listing. {_HOW_TO_GET}")
    tool = Path(nvdisasm).stat()  # another nvdisasm (or a new one) disassembles again
    key = hashlib.sha256(binary + repr((options, nvdisasm, tool.st_size,
                                        tool.st_mtime_ns)).encode())
    return build.disk_cached("nvdisasm", key.hexdigest()[:32],
                             lambda: _run_nvdisasm(nvdisasm, binary, options).encode()).decode()


def _run_nvdisasm(nvdisasm: str, binary: bytes, options: tuple) -> str:
    with tempfile.TemporaryDirectory(prefix="rmsnorm-lessons-sass-") as tmp:
        cubin = Path(tmp) / "kernel.cubin"
        cubin.write_bytes(binary)
        try:
            proc = subprocess.run([nvdisasm, *options, str(cubin)], capture_output=True, text=True,
                                  timeout=120)
        except subprocess.TimeoutExpired as exc:
            raise RuntimeError(f"nvdisasm {' '.join(options)} took more than {exc.timeout:.0f} "
                               "s") from None
    if proc.returncode != 0 and "nknown option" in proc.stderr:
        raise ToolMissing(f"{nvdisasm} is too old for `nvdisasm {' '.join(options)}` "
                          f"({proc.stderr.strip()}); the SASS listings need nvdisasm 12.8 or "
                          f"later, found before it. {_HOW_TO_GET}")
    if proc.returncode != 0:
        raise RuntimeError(f"nvdisasm {' '.join(options)} failed ({proc.returncode}): "
                           f"{proc.stderr.strip()}")
    return proc.stdout


def nvdisasm_json(binary: bytes) -> str:
    """``nvdisasm -json`` of a cubin: the disassembly as JSON text, what :func:`parse_sass`
    reads."""
    return _nvdisasm(binary, "-json")


@functools.lru_cache(maxsize=16)
def _raw_cached(digest: str, binary: bytes) -> str:
    return _nvdisasm(binary, "-c", "-hex")


def raw_sass(name, arch: str = DEFAULT_ARCH) -> str:
    """nvdisasm's own listing of a version or ``kernels/<name>.cu`` for ``arch``: the code sections
    with their labels, branch targets and instruction encodings."""
    compiled = build.compile_file(resolve(name), arch)
    return _raw_cached(hashlib.sha1(compiled.binary).hexdigest(), compiled.binary)


@functools.lru_cache(maxsize=64)
def _listing_cached(digest: str, name: str, arch: str, binary: bytes) -> Listing:
    return parse_sass(nvdisasm_json(binary), name, arch)


def _listing(target, arch: str) -> Listing:
    compiled = build.compile_file(target, arch)
    return _listing_cached(hashlib.sha1(compiled.binary).hexdigest(), _label(target), arch,
                           compiled.binary)


def listing(name, arch: str = DEFAULT_ARCH) -> Listing:
    """The parsed SASS of every kernel in ``kernels/<name>.cu`` for ``arch``."""
    return _listing(resolve(name), arch)


def _functions(target, arch: str, kernel: str | None) -> list[Function]:
    lst = _listing(target, arch)
    if kernel is None:
        return list(lst.functions.values())
    if kernel not in lst.functions:
        raise ValueError(f"no kernel {kernel!r} in {_label(target)}; it has "
                         f"{', '.join(lst.functions)}")
    return [lst.functions[kernel]]


def _count_instructions(instructions) -> dict[str, int]:
    counts = dict.fromkeys(COUNT_KEYS, 0)
    for ins in instructions:
        if ins.opcode == "NOP":
            continue
        counts["instructions"] += 1
        for k in ins.keys:
            counts[k] += 1
    return counts


def count(name, arch: str = DEFAULT_ARCH, kernel: str | None = None) -> dict[str, int]:
    """How many of each instruction that matters the SASS holds (all kernels of the file, or one).

    Keys: ``LDG.128``/``STG.128`` 128-bit global loads/stores; ``LDG``/``STG`` all global
    loads/stores (the 128-bit ones included); ``LDS``/``STS`` shared memory; ``LDL``/``STL`` local
    memory (spills);
    ``SHFL`` shuffles; ``ATOM`` every atomic, split into ``ATOMG`` (global) and ``ATOMS`` (shared);
    ``RED`` global reductions; ``REDUX`` warp reductions; ``BAR`` barriers; ``MEMBAR`` and ``FENCE``
    memory fences; ``instructions`` all instructions but NOPs.
    """
    target = resolve(name)
    return _count_instructions(i for f in _functions(target, arch, kernel) for i in f.instructions)


_SUMMARY = (("LDG.128", "128-bit loads"), ("STG.128", "128-bit stores"), ("LDG", "global loads"),
            ("STG", "global stores"), ("SHFL", "shuffles"), ("ATOMS", "shared atomics"),
            ("ATOMG", "global atomics"), ("RED", "global reductions"), ("BAR", "barriers"),
            ("MEMBAR", "fences"), ("FENCE", "fences (FENCE)"), ("LDL", "local loads"),
            ("STL", "local stores"))


def summary(counts: dict[str, int], all_keys: bool = False) -> str:
    """``128-bit loads: 57, 128-bit stores: 3, ...`` (zeros left out unless ``all_keys``; the first
    two always shown)."""
    items = [f"{label}: {counts.get(key, 0)}" for key, label in _SUMMARY
             if all_keys or counts.get(key, 0) or key in ("LDG.128", "STG.128")]
    return ", ".join(items) + f" ({counts.get('instructions', 0)} instructions)"


def sass(name, arch: str = DEFAULT_ARCH, marked: bool = True, kernel: str | None = None) -> str:
    """The SASS of ``kernels/<name>.cu`` for ``arch``, one instruction a line, without the
    encodings.

    With ``marked`` the lines that matter end in a tag such as ``<< 128-bit load`` and every kernel
    opens with its counts. ``kernel`` picks one kernel of the file.
    """
    target = resolve(name)
    out = []
    for f in _functions(target, arch, kernel):
        counts = _count_instructions(f.instructions)
        out.append(f"// {f.name} ({f.arch or arch}), {counts['instructions']} instructions")
        if marked:
            out.append("// " + summary(counts).rsplit(" (", 1)[0])
        for ins in f.instructions:
            line = f"    /*{ins.offset:04x}*/  {ins.text} ;"
            if marked and ins.mark:
                line = f"{line:<64} << {ins.mark}"
            out.append(line.rstrip())
        out.append("")
    return "\n".join(out)


def marked_lines(name, arch: str = DEFAULT_ARCH, kernel: str | None = None,
                 key: str | None = None) -> list[str]:
    """Only the marked lines of :func:`sass` (or those adding to one :func:`count` key, e.g.
    ``"SHFL"``)."""
    target = resolve(name)
    return [f"/*{i.offset:04x}*/  {i.text} ;  << {i.mark}"
            for f in _functions(target, arch, kernel) for i in f.instructions
            if i.mark and (key is None or key in i.keys)]


# --------------------------------------------------------------------------------------------------
# the report


def describe(r) -> str:
    """One line for a :class:`~rmsnorm_lessons.core.build.Resources` record."""
    spill = (f"spills {r.spill_stores} B stored / {r.spill_loads} B loaded" if r.spills
             else "no spills")
    return (f"{r.kernel} ({r.arch}): {r.registers} registers, {r.shared_bytes} B static shared "
            f"memory, {r.stack_bytes} B stack, {spill}, {r.barriers} barrier(s)")


def report(name, arch: str = DEFAULT_ARCH) -> str:
    """Resources and instruction counts of every kernel of a version or file, two lines a kernel.
    Where nvdisasm is missing, says so instead of the counts.

    :func:`rmsnorm_lessons.inspection.occupancy.report` is this report followed by a version's
    launch and occupancy at a width C (``python -m rmsnorm_lessons inspect`` prints that one).
    """
    target = resolve(name)
    lines = []
    res = resources(target, arch)
    try:
        lst = _listing(target, arch)
    except ToolMissing as exc:
        lst, missing = None, str(exc)
    for kernel, r in res.items():
        lines.append(describe(r))
        if lst is not None and kernel in lst.functions:
            lines.append("    " + summary(_count_instructions(lst.functions[kernel].instructions)))
    if lst is None:
        lines.append(f"SASS counts unavailable: {missing}")
    return "\n".join(lines)
