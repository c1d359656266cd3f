"""Places in a twin build, read back as lines of the kernel's text.

The runtime names a place as ``{{pc,caller,...}}``: offsets in the shared library of the access
(a return address) and of the calls that led to it (``__tsan_func_entry``). :func:`resolve`
replaces every such token in a report with the line of the learner's text (or ``file:line`` of a
shipped file), reading the library's line tables with ``addr2line`` (binutils, which g++ needs).
"""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

TOKEN = re.compile(r"\{\{([0-9a-f,]+)\}\}")
SYMBOL = re.compile(r"\[\[([0-9a-f]+)\]\]")
#: the twin's own headers: a place inside them is named by the kernel line that called them
OWN = ("cuda_twin.h", "twin_bf16.h", "type_traits", "utility")


def _frames(library: Path, addresses: list[int]) -> dict[int, list[tuple[str, str, int]]]:
    """``{address: [(function, file, line), ...]}``, innermost inlined frame first."""
    tool = shutil.which("addr2line")
    if tool is None or not addresses:
        return {}
    query = [hex(a - 1 if a else 0) for a in addresses]  # a return address: the call is before it
    done = subprocess.run([tool, "-e", str(library), "-f", "-i", "-C", "-a", *query],
                          capture_output=True, text=True)
    out: dict[int, list] = {}
    current = None
    lines = done.stdout.splitlines()
    k = 0
    while k < len(lines):
        line = lines[k]
        if line.startswith("0x"):
            current = addresses[query.index(hex(int(line, 16)))] if hex(int(line, 16)) in query \
                else None
            out.setdefault(current, [])
            k += 1
            continue
        function = line
        place = lines[k + 1] if k + 1 < len(lines) else "??:0"
        k += 2
        file, _, number = place.rpartition(":")
        number = re.match(r"\d+", number)
        if current is not None:
            out[current].append((function, Path(file).name, int(number.group(0)) if number else 0))
    return out


def _name(frames, label: str) -> str:
    """The place to show: the first frame in the learner's text (``line N``), else the first not
    in the twin's own headers (``file:line``), with the innermost frame beside it when it
    differs."""
    if not frames:
        return "an unknown place"
    mine = [f for f in frames if f[1] == label and f[2]]
    shown = mine[0] if mine else next((f for f in frames if f[1] not in OWN and f[2]), frames[0])
    text = f"line {shown[2]}" if shown[1] == label else f"{shown[1]}:{shown[2]}"
    inner = next((f for f in frames if f[1] not in OWN and f[2]), None)
    if inner is not None and inner != shown:
        text += f" (in {inner[0].split('(')[0]}, {inner[1]}:{inner[2]})"
    return text


def _symbols(library: Path) -> list[tuple[int, int, str]]:
    """``(address, size, name)`` of the library's data symbols (static ``__shared__`` arrays)."""
    tool = shutil.which("nm")
    if tool is None:
        return []
    done = subprocess.run([tool, "-C", "-S", "--defined-only", str(library)], capture_output=True,
                          text=True)
    out = []
    for line in done.stdout.splitlines():
        parts = line.split(maxsplit=3)
        if len(parts) == 4 and parts[2].lower() in "bdgs":
            out.append((int(parts[0], 16), int(parts[1], 16), parts[3]))
    return out


def _variable(symbols, offset: int) -> str:
    for address, size, name in symbols:
        if address <= offset < address + size:
            return f"__shared__ {name.split('::')[-1]} (byte {offset - address})"
    return f"static __shared__ memory (offset {offset:#x})"


def resolve(texts: list[str], library: Path, label: str) -> list[str]:
    """``texts`` with every ``{{...}}`` place replaced by its line (see :func:`_name`)."""
    chains = [[int(x, 16) for x in m.group(1).split(",")] for t in texts
              for m in TOKEN.finditer(t)]
    frames = _frames(library, sorted({a for chain in chains for a in chain}))

    def name(m):
        chain = [int(x, 16) for x in m.group(1).split(",")]
        return _name([f for a in chain for f in frames.get(a, [])], label)
    texts = [TOKEN.sub(name, t) for t in texts]
    if any(SYMBOL.search(t) for t in texts):
        symbols = _symbols(library)
        texts = [SYMBOL.sub(lambda m: _variable(symbols, int(m.group(1), 16)), t) for t in texts]
    return texts
