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
numbers, ``report(name)`` the resources and the numbers in a few lines
(:func:`rmsnorm_lessons.occupancy.report` adds the launch and the occupancy at a width C). ``name`` is a
version of the ladder (its name or its :class:`~rmsnorm_lessons.ladder.Rung`, a learner's registered
rung too) or any file of ``kernels/``. SASS comes from ``nvdisasm -json`` (the disassembly as JSON, read
by :func:`parse_sass`); CUDA ships nvdisasm, and without a CUDA install NVIDIA's pip wheel
``nvidia-cuda-nvdisasm`` provides it (``make test`` installs it).
"""
from __future__ import annotations

import functools
import hashlib
import json
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from . import build, ladder

DEFAULT_ARCH = build.DEFAULT_ARCH


class ToolMissing(RuntimeError):
    """nvdisasm, the CUDA binary tool that disassembles a cubin, is not installed (or is too old for
    ``-json``); the message says how to get it."""


_HOW_TO_GET = (
    "It ships with the CUDA toolkit (put its bin/ on PATH or set CUDA_HOME); without a toolkit, "
    "`pip install nvidia-cuda-nvdisasm` installs it (`make test` and tools/setup-venv.sh put it into "
    ".venv). Registers, shared memory and PTX need only nvcc."
)


def resolve(name):
    """What :mod:`~rmsnorm_lessons.build` compiles for ``name``: a version's
    :class:`~rmsnorm_lessons.ladder.Rung` (given by name or itself), else the name of a file of
    ``kernels/``; FileNotFoundError (listing the files) for anything else."""
    if isinstance(name, ladder.Rung):
        return name
    try:
        return ladder.get(name)
    except (TypeError, ValueError):  # not a version: a file of kernels/ (timing, rmsnorm_forward, ...)
        build.kernel_path(name)  # a clear FileNotFoundError listing the known files
        return name


def _label(target) -> str:
    return getattr(target, "name", target)


# ----------------------------------------------------------------------------------------------------
# PTX and resources


def resources(name, arch: str = DEFAULT_ARCH) -> dict:
    """ptxas's report of every kernel in the file: ``{kernel: Resources}`` (no GPU needed)."""
    return build.compile_file(resolve(name), arch).resources


def ptx(name, arch: str = DEFAULT_ARCH) -> str:
    """The PTX of a version or of ``kernels/<name>.cu``: the virtual instruction set that nvcc hands to ptxas."""
    return build.compile_file(resolve(name), arch, kind="ptx").binary.decode()


def max_threads_per_block(name, kernel: str, arch: str = DEFAULT_ARCH) -> int | None:
    """The block size a kernel's ``__launch_bounds__`` allows (PTX ``.maxntid``), or None if unbounded."""
    text = ptx(name, arch)
    m = re.search(r"\.entry\s+" + re.escape(kernel) + r"\s*\((?:[^()]|\([^()]*\))*\)\s*(.*?)\{", text, re.S)
    if not m:
        raise ValueError(f"no kernel {kernel!r} in the PTX of {_label(resolve(name))} ({arch})")
    bounds = re.search(r"\.maxntid\s+(\d+)\s*,\s*(\d+)\s*,\s*(\d+)", m.group(1))
    if not bounds:
        return None
    x, y, z = (int(g) for g in bounds.groups())
    return x * y * z


# ----------------------------------------------------------------------------------------------------
# SASS


def _nvdisasm(binary: bytes, *options: str) -> str:
    """``nvdisasm <options> <cubin>``: what it prints, or ToolMissing / RuntimeError saying why not."""
    nvdisasm = build.find_tool("nvdisasm")
    if nvdisasm is None:
        raise ToolMissing(f"nvdisasm was not found on PATH, under CUDA_HOME or in NVIDIA's pip wheels, so "
                          f"there is no SASS listing. {_HOW_TO_GET}")
    with tempfile.TemporaryDirectory(prefix="rmsnorm-lessons-sass-") as tmp:
        cubin = Path(tmp) / "kernel.cubin"
        cubin.write_bytes(binary)
        try:
            proc = subprocess.run([nvdisasm, *options, str(cubin)], capture_output=True, text=True, timeout=120)
        except subprocess.TimeoutExpired as exc:
            raise RuntimeError(f"nvdisasm {' '.join(options)} took more than {exc.timeout:.0f} s") from None
    if proc.returncode != 0 and "nknown option" in proc.stderr:
        raise ToolMissing(f"{nvdisasm} is too old for `nvdisasm {' '.join(options)}` ({proc.stderr.strip()}); "
                          f"the SASS listings need nvdisasm 12.8 or later, found before it. {_HOW_TO_GET}")
    if proc.returncode != 0:
        raise RuntimeError(f"nvdisasm {' '.join(options)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


def nvdisasm_json(binary: bytes) -> str:
    """``nvdisasm -json`` of a cubin: the disassembly as JSON text, what :func:`parse_sass` reads."""
    return _nvdisasm(binary, "-json")


@functools.lru_cache(maxsize=16)
def _raw_cached(digest: str, binary: bytes) -> str:
    return _nvdisasm(binary, "-c", "-hex")


def raw_sass(name, arch: str = DEFAULT_ARCH) -> str:
    """nvdisasm's own listing of a version or ``kernels/<name>.cu`` for ``arch``: the code sections with
    their labels, branch targets and instruction encodings."""
    compiled = build.compile_file(resolve(name), arch)
    return _raw_cached(hashlib.sha1(compiled.binary).hexdigest(), compiled.binary)


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
    raw: str  # the nvdisasm -json text it was parsed from (raw_sass() is the readable listing)
    functions: dict  # kernel name -> Function, in nvdisasm's order


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


_REGISTER = re.compile(r"U?R(\d+|Z)")
_REGISTER_AND_OFFSET = ("BRX", "BRXU", "JMX", "JMXU", "RET", "CALL")  # "BRX R4 -0x150": no comma
_TWO_ADDRESSES = re.compile(r"(\[[^\[\]]*\])(\[[^\[\]]*\])")  # "[R7][R2.64]": two operands, no comma


# nvdisasm 13.0's JSON joins a register and the address after it with no comma (`LDS.128 R4[R24+UR4]`)
_REGISTER_THEN_ADDRESS = re.compile(r"(U?R\d+|U?RZ|U?P\d|U?PT)(\[.+\])")


# sm_90's global address of an asynchronous copy (LDGSTS) is a descriptor and a register pair, "desc[UR10][R12.64]"
_GLOBAL_ADDRESS = r"desc\[[^\[\]]*\]\[[^\[\]]*\]|\[[^\[\]]*\.64[^\[\]]*\]"
_TWO_WITH_GLOBAL = re.compile(rf"({_GLOBAL_ADDRESS})(\[[^\[\]]*\])|(\[[^\[\]]*\])({_GLOBAL_ADDRESS})")


def _shared_address_first(ops: list) -> list:
    """An LDGSTS's operands as cuobjdump orders them, ``[R37], desc[UR10][R12.64]``: the shared-memory
    address, then the global one, whatever order (and commas) the JSON of this nvdisasm gave them in."""
    pieces = []
    for op in ops:
        two = _TWO_WITH_GLOBAL.fullmatch(op)
        pieces += [g for g in two.groups() if g] if two else [op]
    globals_ = [p for p in pieces if re.fullmatch(_GLOBAL_ADDRESS, p)]
    shared = [p for p in pieces if p.startswith("[") and p not in globals_]
    if len(globals_) != 1 or len(shared) != 1:
        return ops  # not the two addresses expected: leave it as given
    rest = [p for p in pieces if p not in globals_ and p not in shared]
    return shared + globals_ + rest


def _text(ins: dict, function: str) -> str:
    """One instruction as cuobjdump prints it, e.g. ``@P0 LDG.E.128 R4, desc[UR6][R2.64]``.

    nvdisasm's JSON differs from cuobjdump's text in a few places, put right here: P2R's ``PR`` operand
    arrives as the "predicate"; two bare addresses (sm_80's ``LDGSTS [R7], [R2.64]``) lose their comma;
    a register and its offset (``BRX R4 -0x150``, ``RET.REL.NODEC R2 0x0``) are joined by a space, not a
    comma, and RET.REL names its own function where cuobjdump prints offset 0x0. One difference stays:
    ``CALL.REL`` names its target (``$__internal_0_$__cuda_sm20_sqrt_rn_f32_slowpath``) where cuobjdump
    printed its offset, which the JSON does not give.
    """
    opcode = ins["opcode"]
    pred = ins.get("predicate") or ""
    operands = ins.get("operands") or ""
    ops = []
    for op in operands.split(",") if operands else []:
        two = _TWO_ADDRESSES.fullmatch(op) or _REGISTER_THEN_ADDRESS.fullmatch(op)
        ops += two.groups() if two else [op]
    if pred and not pred.startswith("@"):  # P2R R0, PR, RZ, 0x1: PR is an operand
        if pred not in ops:
            ops.insert(1 if opcode.startswith("P2R") else 0, pred)
        pred = ""
    if opcode.startswith("LDGSTS"):  # cuobjdump: the shared-memory address first, then the global one
        ops = _shared_address_first(ops)
    if opcode.split(".")[0] in _REGISTER_AND_OFFSET and len(ops) == 2 and _REGISTER.fullmatch(ops[0]):
        ops = [f"{ops[0]} {'0x0' if ops[1] == function else ops[1]}"]
    return " ".join(p for p in (pred, opcode, ", ".join(ops)) if p)


def parse_sass(raw: str, name: str = "", arch: str = "") -> Listing:
    """Read ``nvdisasm -json``'s output: its kernels and their marked instructions.

    The JSON (nvdisasm 12.8 and later) is a list: a record of the file (``SM`` version...) then the
    functions, each with its ``function-name``, ``length`` and ``sass-instructions`` (``predicate``,
    ``opcode``, ``operands``). An instruction's offset in its function is its index times 16 bytes, the
    numbers cuobjdump printed (an empty opcode marks a gap: it takes its 16 bytes and is no instruction).
    The JSON gives ``sm_90`` for ``sm_90a``: the suffix comes from ``arch``. A subroutine nvcc adds to a
    kernel (``$__internal_0_$__cuda_sm70_shflsync_bfly_p``, which sm_80's shuffles with a mask that is
    not a constant call) comes as a function of its own that lies inside the kernel's code (its
    ``start`` within the kernel's ``length``): it is put back at the kernel's end, as cuobjdump shows it.
    """
    data = json.loads(raw)
    meta = data[0] if data and isinstance(data[0], dict) else {}
    version = meta.get("SM", {}).get("version", {})
    found_arch = arch
    if "major" in version:
        found_arch = f"sm_{version['major']}{version.get('minor', 0)}"
        if re.fullmatch(re.escape(found_arch) + r"[a-z]", arch or ""):
            found_arch = arch
    functions: dict[str, Function] = {}
    kernel = None  # (name, start, length) of the last kernel: a subroutine inside it belongs to it
    for f in next((d for d in data if isinstance(d, list)), []):
        fname, start = f["function-name"], int(f.get("start", 0))
        inside = (fname.startswith("$") and kernel is not None and kernel[1] <= start < kernel[1] + kernel[2])
        owner = kernel[0] if inside else None
        base = start - kernel[1] if inside else 0
        instrs = []
        for i, ins in enumerate(f.get("sass-instructions", [])):
            opcode = ins.get("opcode", "")
            if not opcode or not opcode[0].isalpha():
                continue
            mark, keys = classify(opcode)
            instrs.append(Instruction(base + 16 * i, _text(ins, owner or fname), opcode, mark, keys))
        if owner:  # a subroutine the kernel calls: its code, as cuobjdump printed it, at the kernel's end
            functions[owner] = Function(owner, found_arch, functions[owner].instructions + tuple(instrs))
        else:
            functions[fname] = Function(fname, found_arch, tuple(instrs))
            kernel = (fname, start, int(f.get("length", 16 * len(f.get("sass-instructions", [])))))
    return Listing(name, found_arch, raw, functions)


@functools.lru_cache(maxsize=64)
def _listing_cached(digest: str, name: str, arch: str, binary: bytes) -> Listing:
    return parse_sass(nvdisasm_json(binary), name, arch)


def _listing(target, arch: str) -> Listing:
    compiled = build.compile_file(target, arch)
    return _listing_cached(hashlib.sha1(compiled.binary).hexdigest(), _label(target), arch, compiled.binary)


def listing(name, arch: str = DEFAULT_ARCH) -> Listing:
    """The parsed SASS of every kernel in ``kernels/<name>.cu`` for ``arch``."""
    return _listing(resolve(name), arch)


def _functions(target, arch: str, kernel: str | None) -> list[Function]:
    lst = _listing(target, arch)
    if kernel is None:
        return list(lst.functions.values())
    if kernel not in lst.functions:
        raise ValueError(f"no kernel {kernel!r} in {_label(target)}; it has {', '.join(lst.functions)}")
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
    target = resolve(name)
    return _count_instructions(i for f in _functions(target, arch, kernel) for i in f.instructions)


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


def marked_lines(name, arch: str = DEFAULT_ARCH, kernel: str | None = None, key: str | None = None) -> list[str]:
    """Only the marked lines of :func:`sass` (or those adding to one :func:`count` key, e.g. ``"SHFL"``)."""
    target = resolve(name)
    return [f"/*{i.offset:04x}*/  {i.text} ;  << {i.mark}"
            for f in _functions(target, arch, kernel) for i in f.instructions
            if i.mark and (key is None or key in i.keys)]


# ----------------------------------------------------------------------------------------------------
# the report


def describe(r) -> str:
    """One line for a :class:`~rmsnorm_lessons.build.Resources` record."""
    spill = (f"spills {r.spill_stores} B stored / {r.spill_loads} B loaded" if r.spills else "no spills")
    return (f"{r.kernel} ({r.arch}): {r.registers} registers, {r.shared_bytes} B static shared memory, "
            f"{r.stack_bytes} B stack, {spill}, {r.barriers} barrier(s)")


def report(name, arch: str = DEFAULT_ARCH) -> str:
    """Resources and instruction counts of every kernel of a version or file, two lines a kernel. Where
    nvdisasm is missing, says so instead of the counts.

    :func:`rmsnorm_lessons.occupancy.report` is this report followed by a version's launch and occupancy
    at a width C (``python -m rmsnorm_lessons inspect`` prints that one).
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
