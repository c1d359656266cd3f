"""What the compiler made of a kernel, without a GPU: ptxas resources, PTX, and SASS with marks.

SASS is the machine code the GPU runs. Reading all of it is not the point; a handful of instructions tell
whether an optimisation happened:

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
numbers, ``report(name)`` the resources and the numbers in a few lines. SASS needs ``cuobjdump`` (and the
``nvdisasm`` it calls): CUDA ships both; without a CUDA install, NVIDIA's pip wheels
``nvidia-cuda-cuobjdump`` and ``nvidia-cuda-nvdisasm`` provide them (``make test`` installs them).
"""
from __future__ import annotations

import functools
import hashlib
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from . import build

DEFAULT_ARCH = build.DEFAULT_ARCH


class ToolMissing(RuntimeError):
    """A CUDA binary tool (cuobjdump, nvdisasm) is not installed; the message says how to get it."""


_HOW_TO_GET = (
    "It ships with the CUDA toolkit (put its bin/ on PATH or set CUDA_HOME); without a toolkit, "
    "`pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm` installs both (`make test` and "
    "tools/setup-venv.sh put them into .venv). Registers, shared memory and PTX need only nvcc."
)


def _name(name) -> str:
    """A version (its name or its :class:`~rmsnorm_lessons.kernels.Version`) or a file of ``kernels/``."""
    name = getattr(name, "name", name)
    build.kernel_path(name)  # a clear FileNotFoundError listing the known files
    return name


# ----------------------------------------------------------------------------------------------------
# PTX and resources


def resources(name, arch: str = DEFAULT_ARCH) -> dict:
    """ptxas's report of every kernel in the file: ``{kernel: Resources}`` (no GPU needed)."""
    return build.compile_file(_name(name), arch).resources


def ptx(name, arch: str = DEFAULT_ARCH) -> str:
    """The PTX of ``kernels/<name>.cu``: the virtual instruction set that nvcc hands to ptxas."""
    return build.compile_file(_name(name), arch, kind="ptx").binary.decode()


def max_threads_per_block(name, kernel: str, arch: str = DEFAULT_ARCH) -> int | None:
    """The block size a kernel's ``__launch_bounds__`` allows (PTX ``.maxntid``), or None if unbounded."""
    text = ptx(name, arch)
    m = re.search(r"\.entry\s+" + re.escape(kernel) + r"\s*\((?:[^()]|\([^()]*\))*\)\s*(.*?)\{", text, re.S)
    if not m:
        raise ValueError(f"no kernel {kernel!r} in the PTX of {name} ({arch})")
    bounds = re.search(r"\.maxntid\s+(\d+)\s*,\s*(\d+)\s*,\s*(\d+)", m.group(1))
    if not bounds:
        return None
    x, y, z = (int(g) for g in bounds.groups())
    return x * y * z


# ----------------------------------------------------------------------------------------------------
# SASS


def _tool(tool: str) -> str:
    path = build.find_tool(tool)
    if path is None:
        raise ToolMissing(f"{tool} was not found on PATH, under CUDA_HOME or in NVIDIA's pip wheels, so "
                          f"there is no SASS listing. {_HOW_TO_GET}")
    return path


def cuobjdump_sass(binary: bytes) -> str:
    """``cuobjdump -sass`` of a cubin, as cuobjdump prints it (encodings and all)."""
    cuobjdump = _tool("cuobjdump")
    env = dict(os.environ)
    nvdisasm = build.find_tool("nvdisasm")  # cuobjdump runs nvdisasm; it looks on PATH
    if nvdisasm:
        env["PATH"] = str(Path(nvdisasm).parent) + os.pathsep + env.get("PATH", "")
    with tempfile.TemporaryDirectory(prefix="rmsnorm-lessons-sass-") as tmp:
        cubin = Path(tmp) / "kernel.cubin"
        cubin.write_bytes(binary)
        try:
            proc = subprocess.run([cuobjdump, "-sass", str(cubin)], capture_output=True, text=True,
                                  env=env, timeout=120)
        except subprocess.TimeoutExpired as exc:
            raise RuntimeError(f"cuobjdump -sass took more than {exc.timeout:.0f} s") from None
    if "nvdisasm" in proc.stderr and (proc.returncode != 0 or "fatal" in proc.stderr):
        raise ToolMissing(f"cuobjdump ({cuobjdump}) needs nvdisasm, which was not found. {_HOW_TO_GET}")
    if proc.returncode != 0:
        raise RuntimeError(f"cuobjdump -sass failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


def raw_sass(name, arch: str = DEFAULT_ARCH) -> str:
    """cuobjdump's own listing of ``kernels/<name>.cu`` for ``arch`` (with the instruction encodings)."""
    return _listing(_name(name), arch).raw


@dataclass(frozen=True)
class Instruction:
    offset: int  # byte offset in the kernel's code
    text: str  # e.g. "@P0 LDG.E.128 R4, desc[UR6][R2.64]"
    opcode: str  # e.g. "LDG.E.128" (the predicate stripped)
    mark: str | None  # e.g. "128-bit load", None for unremarkable instructions
    keys: tuple[str, ...]  # the count() keys it adds to

    @property
    def mnemonic(self) -> str:
        return self.opcode.split(".")[0]


@dataclass(frozen=True)
class Function:
    name: str
    arch: str
    instructions: tuple[Instruction, ...]


@dataclass(frozen=True)
class Listing:
    name: str
    arch: str
    raw: str
    functions: dict  # kernel name -> Function, in cuobjdump's order


_INSTR = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
_PRED = re.compile(r"^@!?U?P[T0-9]+\s+")
_FUNC = re.compile(r"^\s*Function\s*:\s*(\S+)")
_ARCH = re.compile(r"code for (sm_\w+)")

_WIDTHS = {"U8": 8, "S8": 8, "U16": 16, "S16": 16, "64": 64, "128": 128}
_HINTS = {
    "EF": "evict-first",
    "EL": "evict-last",
    "LU": "last use",
    "NA": "no L1 allocate",
    "CONSTANT": "read-only path",
}

#: the keys of :func:`count`, in the order reports print them
COUNT_KEYS = ("LDG.128", "STG.128", "LDG", "STG", "LDS", "STS", "LDL", "STL", "SHFL", "ATOM", "ATOMG",
              "ATOMS", "RED", "REDUX", "BAR", "MEMBAR", "FENCE", "instructions")


def _width(parts: list[str]) -> int:
    for p in parts[1:]:
        if p in _WIDTHS:
            return _WIDTHS[p]
    return 32


def _hints(parts: list[str]) -> str:
    words = [_HINTS[p] for p in parts[1:] if p in _HINTS]
    if "STRONG" in parts:
        scope = next((p for p in parts if p in ("GPU", "SYS", "SM")), "")
        words.append({"GPU": "coherent at GPU scope", "SYS": "coherent system-wide"}.get(scope, "strong"))
    for p in parts[1:]:
        m = re.fullmatch(r"LTC(\d+)B", p)
        if m:
            words.append(f"L2 prefetch {m.group(1)} B")
    return (", " + ", ".join(words)) if words else ""


def classify(opcode: str) -> tuple[str | None, tuple[str, ...]]:
    """The mark (or None) and the :func:`count` keys of one SASS opcode such as ``LDG.E.EF.128``."""
    parts = opcode.split(".")
    op = parts[0]
    if op in ("LDG", "STG"):
        width = _width(parts)
        what = "load" if op == "LDG" else "store"
        keys = (op, f"{op}.128") if width == 128 else (op,)
        return f"{width}-bit global {what}{_hints(parts)}" if width != 128 else f"128-bit {what}{_hints(parts)}", keys
    if op in ("LDS", "STS"):
        return None, (op,)
    if op in ("LDL", "STL"):
        return f"local memory {'load' if op == 'LDL' else 'store'} (register spill or local array)", (op,)
    if op == "SHFL":
        mode = parts[1] if len(parts) > 1 else ""
        return f"warp shuffle{' ' + mode if mode else ''}", ("SHFL",)
    if op == "ATOMS":
        return "shared-memory atomic" + (" (compare-and-swap loop)" if "CAST" in parts else ""), ("ATOM", "ATOMS")
    if op in ("ATOM", "ATOMG"):
        return f"global atomic {'.'.join(p for p in parts[1:] if p not in ('E', 'STRONG', 'GPU', 'SYS'))}".rstrip(), \
            ("ATOM", "ATOMG")
    if op in ("RED", "REDG"):
        return "global reduction (atomic, no return value)", ("RED",)
    if op == "REDUX":
        return "warp reduction (REDUX)", ("REDUX",)
    if op == "BAR":
        return "barrier (__syncthreads)" if "SYNC" in parts or "RED" in parts else "barrier", ("BAR",)
    if op == "MEMBAR":
        return "memory fence (__threadfence)", ("MEMBAR",)
    if op == "FENCE":
        return "memory fence", ("FENCE",)
    return None, ()


def parse_sass(raw: str, name: str = "", arch: str = "") -> Listing:
    """Split cuobjdump's ``-sass`` output into kernels and marked instructions."""
    functions: dict[str, Function] = {}
    current: str | None = None
    instrs: list[Instruction] = []
    found_arch = arch

    def close():
        if current is not None:
            functions[current] = Function(current, found_arch, tuple(instrs))

    for line in raw.splitlines():
        m = _ARCH.search(line)
        if m:
            found_arch = m.group(1)
        m = _FUNC.match(line)
        if m:
            close()
            current, instrs = m.group(1), []
            continue
        m = _INSTR.match(line)
        if m and current is not None:
            text = m.group(2).strip()
            opcode = _PRED.sub("", text).split()[0] if text else ""
            if not opcode or not opcode[0].isalpha():
                continue
            mark, keys = classify(opcode)
            instrs.append(Instruction(int(m.group(1), 16), text, opcode, mark, keys))
    close()
    return Listing(name, found_arch, raw, functions)


@functools.lru_cache(maxsize=64)
def _listing_cached(digest: str, name: str, arch: str, binary: bytes) -> Listing:
    return parse_sass(cuobjdump_sass(binary), name, arch)


def _listing(name: str, arch: str) -> Listing:
    compiled = build.compile_file(name, arch)
    return _listing_cached(hashlib.sha1(compiled.binary).hexdigest(), name, arch, compiled.binary)


def listing(name, arch: str = DEFAULT_ARCH) -> Listing:
    """The parsed SASS of every kernel in ``kernels/<name>.cu`` for ``arch``."""
    return _listing(_name(name), arch)


def _functions(name: str, arch: str, kernel: str | None) -> list[Function]:
    lst = _listing(name, arch)
    if kernel is None:
        return list(lst.functions.values())
    if kernel not in lst.functions:
        raise ValueError(f"no kernel {kernel!r} in {name}; it has {', '.join(lst.functions)}")
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

    Keys: ``LDG.128``/``STG.128`` 128-bit global loads/stores; ``LDG``/``STG`` all global loads/stores
    (the 128-bit ones included); ``LDS``/``STS`` shared memory; ``LDL``/``STL`` local memory (spills);
    ``SHFL`` shuffles; ``ATOM`` every atomic, split into ``ATOMG`` (global) and ``ATOMS`` (shared);
    ``RED`` global reductions; ``REDUX`` warp reductions; ``BAR`` barriers; ``MEMBAR`` and ``FENCE``
    memory fences; ``instructions`` all instructions but NOPs.
    """
    name = _name(name)
    return _count_instructions(i for f in _functions(name, arch, kernel) for i in f.instructions)


_SUMMARY = (("LDG.128", "128-bit loads"), ("STG.128", "128-bit stores"), ("LDG", "global loads"),
            ("STG", "global stores"), ("SHFL", "shuffles"), ("ATOMS", "shared atomics"),
            ("ATOMG", "global atomics"), ("RED", "global reductions"), ("BAR", "barriers"),
            ("MEMBAR", "fences"), ("FENCE", "fences (FENCE)"), ("LDL", "local loads"), ("STL", "local stores"))


def summary(counts: dict[str, int], all_keys: bool = False) -> str:
    """``128-bit loads: 57, 128-bit stores: 3, ...`` (zeros left out unless ``all_keys``; the first
    two always shown)."""
    items = [f"{label}: {counts.get(key, 0)}" for key, label in _SUMMARY
             if all_keys or counts.get(key, 0) or key in ("LDG.128", "STG.128")]
    return ", ".join(items) + f" ({counts.get('instructions', 0)} instructions)"


def sass(name, arch: str = DEFAULT_ARCH, marked: bool = True, kernel: str | None = None) -> str:
    """The SASS of ``kernels/<name>.cu`` for ``arch``, one instruction a line, without the encodings.

    With ``marked`` the lines that matter end in a tag such as ``<< 128-bit load`` and every kernel opens
    with its counts. ``kernel`` picks one kernel of the file.
    """
    name = _name(name)
    out = []
    for f in _functions(name, arch, kernel):
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


def marked_lines(name, arch: str = DEFAULT_ARCH, kernel: str | None = None, key: str | None = None) -> list[str]:
    """Only the marked lines of :func:`sass` (or those adding to one :func:`count` key, e.g. ``"SHFL"``)."""
    name = _name(name)
    return [f"/*{i.offset:04x}*/  {i.text} ;  << {i.mark}"
            for f in _functions(name, arch, kernel) for i in f.instructions
            if i.mark and (key is None or key in i.keys)]


# ----------------------------------------------------------------------------------------------------
# the report


def describe(r) -> str:
    """One line for a :class:`~rmsnorm_lessons.build.Resources` record."""
    spill = (f"spills {r.spill_stores} B stored / {r.spill_loads} B loaded" if r.spills else "no spills")
    return (f"{r.kernel} ({r.arch}): {r.registers} registers, {r.shared_bytes} B static shared memory, "
            f"{r.stack_bytes} B stack, {spill}, {r.barriers} barrier(s)")


def report(name, arch: str = DEFAULT_ARCH, C: int | None = 4096, block_size: int | None = None) -> str:
    """Resources and instruction counts of every kernel in the file; for a version, its dynamic shared
    memory and occupancy at ``C`` too. Where cuobjdump is missing, says so instead of the counts."""
    from . import kernels

    name = _name(name)
    lines = []
    res = resources(name, arch)
    try:
        lst = _listing(name, arch)
    except ToolMissing as exc:
        lst, missing = None, str(exc)
    for kernel, r in res.items():
        lines.append(describe(r))
        if lst is not None and kernel in lst.functions:
            lines.append("    " + summary(_count_instructions(lst.functions[kernel].instructions)))
    if lst is None:
        lines.append(f"SASS counts unavailable: {missing}")
    if name in kernels.VERSIONS and C is not None:
        from . import occupancy

        spec = kernels.get(name)
        block = block_size or spec.block_size
        lines.append(f"dynamic shared memory at C={C}: {spec.dynamic_smem(C, block)} B (block of {block} threads)")
        try:
            lines.append(occupancy.occupancy(name, C, arch=arch, block_size=block).summary())
        except ValueError as exc:  # an arch without a limits table
            lines.append(f"occupancy: {exc}")
    return "\n".join(lines)
