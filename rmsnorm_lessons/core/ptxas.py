"""What ptxas reports about each kernel (``nvcc -Xptxas -v``): registers, shared and constant
memory, stack, spills and barriers, parsed from its log. :mod:`rmsnorm_lessons.core.build` compiles
and re-exports both names."""
from __future__ import annotations

import re
from dataclasses import dataclass


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
            fields = dict(kernel=current, arch=m.group(2), registers=0, shared_bytes=0,
                          stack_bytes=0, spill_stores=0, spill_loads=0, barriers=0,
                          constant_bytes=0)
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
            for pattern, key in ((_BARRIERS, "barriers"), (_SMEM, "shared_bytes"),
                                 (_CMEM, "constant_bytes")):
                mm = pattern.search(line)
                if mm:
                    fields[key] = int(mm.group(1))
            found[current] = Resources(**fields)
            current = None
    return found
