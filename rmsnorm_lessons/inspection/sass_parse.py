"""Reading ``nvdisasm -json``: the SASS of a cubin as :class:`Listing` records.

:func:`parse_sass` turns nvdisasm's JSON into functions and instructions (offset, text, opcode);
:func:`classify` says what an opcode is (a 128-bit global load, a shuffle, a barrier...) and which
of :data:`COUNT_KEYS` it counts under. :mod:`rmsnorm_lessons.inspection.sass` runs the tools and
re-exports these.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass


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
COUNT_KEYS = ("LDG.128", "STG.128", "LDG", "STG", "LDS", "STS", "LDL", "STL", "SHFL", "ATOM",
              "ATOMG",
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
        scopes = {"GPU": "coherent at GPU scope", "SYS": "coherent system-wide"}
        words.append(scopes.get(scope, "strong"))
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
        bits = "128-bit" if width == 128 else f"{width}-bit global"
        return f"{bits} {what}{_hints(parts)}", keys
    if op in ("LDS", "STS"):
        return None, (op,)
    if op in ("LDL", "STL"):
        what = "load" if op == "LDL" else "store"
        return f"local memory {what} (register spill or local array)", (op,)
    if op == "SHFL":
        mode = parts[1] if len(parts) > 1 else ""
        return f"warp shuffle{' ' + mode if mode else ''}", ("SHFL",)
    if op == "ATOMS":
        return "shared-memory atomic" + (" (compare-and-swap loop)" if "CAST" in parts
                                         else ""), ("ATOM", "ATOMS")
    if op in ("ATOM", "ATOMG"):
        kind = ".".join(p for p in parts[1:] if p not in ("E", "STRONG", "GPU", "SYS"))
        return f"global atomic {kind}".rstrip(), ("ATOM", "ATOMG")
    if op in ("RED", "REDG"):
        return "global reduction (atomic, no return value)", ("RED",)
    if op == "REDUX":
        return "warp reduction (REDUX)", ("REDUX",)
    if op == "BAR":
        synced = "SYNC" in parts or "RED" in parts
        return "barrier (__syncthreads)" if synced else "barrier", ("BAR",)
    if op == "MEMBAR":
        return "memory fence (__threadfence)", ("MEMBAR",)
    if op == "FENCE":
        return "memory fence", ("FENCE",)
    return None, ()


_REGISTER = re.compile(r"U?R(\d+|Z)")
_REGISTER_AND_OFFSET = ("BRX", "BRXU", "JMX", "JMXU", "RET", "CALL")  # "BRX R4 -0x150": no comma
# "[R7][R2.64]": two operands, no comma
_TWO_ADDRESSES = re.compile(r"(\[[^\[\]]*\])(\[[^\[\]]*\])")


# nvdisasm 13.0's JSON joins a register and the address after it with no comma (`LDS.128
# R4[R24+UR4]`)
_REGISTER_THEN_ADDRESS = re.compile(r"(U?R\d+|U?RZ|U?P\d|U?PT)(\[.+\])")


# sm_90's global address of an asynchronous copy (LDGSTS) is a descriptor and a register pair,
# "desc[UR10][R12.64]"
_GLOBAL_ADDRESS = r"desc\[[^\[\]]*\]\[[^\[\]]*\]|\[[^\[\]]*\.64[^\[\]]*\]"
_TWO_WITH_GLOBAL = re.compile(rf"({_GLOBAL_ADDRESS})(\[[^\[\]]*\])"
                              rf"|(\[[^\[\]]*\])({_GLOBAL_ADDRESS})")


def _shared_address_first(ops: list) -> list:
    """An LDGSTS's operands as cuobjdump orders them, ``[R37], desc[UR10][R12.64]``: the
    shared-memory address, then the global one, whatever order (and commas) the JSON of this
    nvdisasm gave them in."""
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

    nvdisasm's JSON differs from cuobjdump's text in a few places, put right here: P2R's ``PR``
    operand arrives as the "predicate"; two bare addresses (sm_80's ``LDGSTS [R7], [R2.64]``) lose
    their comma; a register and its offset (``BRX R4 -0x150``, ``RET.REL.NODEC R2 0x0``) are joined
    by a space, not a comma, and RET.REL names its own function where cuobjdump prints offset 0x0.
    One difference stays:
    ``CALL.REL`` names its target (``$__internal_0_$__cuda_sm20_sqrt_rn_f32_slowpath``) where
    cuobjdump printed its offset, which the JSON does not give.
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
    # cuobjdump: the shared-memory address first, then the global one
    if opcode.startswith("LDGSTS"):
        ops = _shared_address_first(ops)
    if (opcode.split(".")[0] in _REGISTER_AND_OFFSET and len(ops) == 2
            and _REGISTER.fullmatch(ops[0])):
        ops = [f"{ops[0]} {'0x0' if ops[1] == function else ops[1]}"]
    return " ".join(p for p in (pred, opcode, ", ".join(ops)) if p)


def parse_sass(raw: str, name: str = "", arch: str = "") -> Listing:
    """Read ``nvdisasm -json``'s output: its kernels and their marked instructions.

    The JSON (nvdisasm 12.8 and later) is a list: a record of the file (``SM`` version...) then the
    functions, each with its ``function-name``, ``length`` and ``sass-instructions`` (``predicate``,
    ``opcode``, ``operands``). An instruction's offset in its function is its index times 16 bytes,
    the numbers cuobjdump printed (an empty opcode marks a gap: it takes its 16 bytes and is no
    instruction). The JSON gives ``sm_90`` for ``sm_90a``: the suffix comes from ``arch``. A
    subroutine nvcc adds to a kernel (``$__internal_0_$__cuda_sm70_shflsync_bfly_p``, which sm_80's
    shuffles with a mask that is not a constant call) comes as a function of its own that lies
    inside the kernel's code (its
    ``start`` within the kernel's ``length``): it is put back at the kernel's end, as cuobjdump
    shows it.
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
        inside = (fname.startswith("$") and kernel is not None
                  and kernel[1] <= start < kernel[1] + kernel[2])
        owner = kernel[0] if inside else None
        base = start - kernel[1] if inside else 0
        instrs = []
        for i, ins in enumerate(f.get("sass-instructions", [])):
            opcode = ins.get("opcode", "")
            if not opcode or not opcode[0].isalpha():
                continue
            mark, keys = classify(opcode)
            instrs.append(Instruction(base + 16 * i, _text(ins, owner or fname), opcode, mark,
                                      keys))
        # a subroutine the kernel calls: its code, as cuobjdump printed it, at the kernel's end
        if owner:
            functions[owner] = Function(owner, found_arch,
                                        functions[owner].instructions + tuple(instrs))
        else:
            functions[fname] = Function(fname, found_arch, tuple(instrs))
            kernel = (fname, start, int(f.get("length", 16 * len(f.get("sass-instructions", [])))))
    return Listing(name, found_arch, raw, functions)
