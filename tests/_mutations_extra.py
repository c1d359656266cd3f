"""Slips that belong to one kernel exercise's lesson (issue 41), tried on that exercise only
(:data:`EXTRA`): a cache hint dropped and the slot left as the channel (lesson 06), a block's row
of partials written, or a block's column read, at block 0's place (lessons 07 and 08), a fence
dropped and the seed's ``atomicInc`` limit (lesson 08), a lane's columns taken as a block of its
own instead of one every 32 (lessons 03 and 04: right numbers, uncoalesced loads), each thread's
chunks made neighbours (lesson 09), rstd dropped from norm and the dot product reading dout twice
(lesson 10); and round 2 of issue 41's: dinp's old values never loaded (lessons 05 and 06), a slot
other than the channel that still conflicts on the banks (lesson 06), the blocks summed in reverse
order and the partials stored a float at a time (lesson 07). Each class is a function ``text ->
[(mutant id, mutated text), ...]`` built with :mod:`tests._mutations`' helpers, as its own classes
are."""
from __future__ import annotations

import re

import _mutations as base

#: the lessons whose exercise these classes are tried on
EXTRA = {"03_warp_per_row": ("layout",), "04_shared_memory": ("layout",),
         "05_bf16": ("overwrite",), "06_vectorized": ("hint", "staging", "banks", "overwrite"),
         "07_two_pass": ("offset", "order", "narrow"),
         "08_last_block": ("fence", "limit", "offset"), "09_bytes_in_flight": ("chunks",),
         "10_v7_one_pass": ("rstd", "operand")}
#: their kinds, after the base classes' (a class takes its kinds in this order)
base.KINDS += ("slot", "release", "acquire", "seed", "reversed", "rotated", "dinp", "reverse",
               "partials", "neighbours", "norm", "dot")


def hint(text: str):
    """A cache hint dropped: ``load128cs`` read as a plain ``load128``, ``store128cg`` or
    ``store128cs`` stored as a plain ``store128``."""
    code = base._blank_comments(text)
    sites = [("load" if name.startswith("load") else "store", start, open_,
              "load128" if name.startswith("load") else "store128")
             for start, open_, close, name in base._calls(code, r"load128cs|store128c[gs]")]
    return base._mutants("hint", text, sites)


def staging(text: str):
    """The slot of a channel left as the channel itself: ``staged()`` returns ``c``."""
    code = base._blank_comments(text)
    sites = []
    for m in re.finditer(r"\bint\s+staged\s*\(\s*int\s+(\w+)[^)]*\)\s*\{\s*return\s+([^;]+);",
                         code):
        if m.group(2).strip() != m.group(1):
            sites.append(("slot", m.start(2), m.end(2), m.group(1)))
    return base._mutants("staging", text, sites)


def banks(text: str):
    """A slot other than the channel that keeps the 8-way conflict: ``staged()`` returns
    ``C - 1 - c`` (kind reversed) or ``(c + 1) % C`` (kind rotated): each channel its own slot, so
    the results are right, and a warp's 32 adds for one k still reach 4 banks."""
    code = base._blank_comments(text)
    sites = []
    for m in re.finditer(r"\bint\s+staged\s*\(\s*int\s+(\w+)\s*,\s*int\s+(\w+)\s*\)\s*\{\s*"
                         r"return\s+([^;]+);", code):
        c, C = m.group(1), m.group(2)
        sites += [("reversed", m.start(3), m.end(3), f"{C} - 1 - {c}"),
                  ("rotated", m.start(3), m.end(3), f"({c} + 1) % {C}")]
    return base._mutants("banks", text, sites)


def overwrite(text: str):
    """dinp's old values never loaded: the ``load128`` of dinp becomes ``x128::zeros()``, so the
    kernel overwrites dinp instead of adding into it."""
    code = base._blank_comments(text)
    sites = [("dinp", start, close + 1, "x128::zeros()")
             for start, open_, close, name in base._calls(code, r"load128\w*")
             if re.match(r"\s*dinp", code[open_ + 1:close])]
    return base._mutants("overwrite", text, sites)


def order(text: str):
    """The blocks' partials summed in reverse order: ``for (int b = 0; b < blocks; b++)`` becomes
    ``for (int b = blocks - 1; b >= 0; b--)``: the same terms, another float32 sum."""
    code, sites = base._blank_comments(text), []
    for m in re.finditer(r"for\s*\(\s*int\s+(\w+)\s*=\s*0\s*;\s*\1\s*<\s*(blocks|gridDim\.x)\s*;"
                         r"\s*\1\s*\+\+\s*\)", code):
        b, n = m.group(1), m.group(2)
        sites.append(("reverse", m.start(), m.end(), f"for (int {b} = {n} - 1; {b} >= 0; {b}--)"))
    return base._mutants("order", text, sites)


def narrow(text: str):
    """The partials stored a float at a time: v5's ``store128(my_partials + c, load128(...))``
    loop becomes one float a thread and a step."""
    code, sites = base._blank_comments(text), []
    pattern = (r"for\s*\(\s*int\s+c\s*=\s*threadIdx\.x\s*\*\s*f128::size\s*;\s*c\s*<\s*C\s*;"
               r"\s*c\s*\+=\s*blockDim\.x\s*\*\s*f128::size\s*\)\s*\{\s*store128\s*\(\s*(\w+)"
               r"\s*\+\s*c\s*,\s*load128\s*\(\s*(\w+)\s*\+\s*c\s*\)\s*\)\s*;\s*\}")
    for m in re.finditer(pattern, code):
        new = (f"for (int c = threadIdx.x; c < C; c += blockDim.x) {{\n        "
               f"{m.group(1)}[c] = {m.group(2)}[c];\n    }}")
        sites.append(("partials", m.start(), m.end(), new))
    return base._mutants("narrow", text, sites)


def fence(text: str):
    """A fence dropped: the release (a ``__threadfence();`` every thread runs) or the acquire (one
    under an ``if``)."""
    code, sites = base._blank_comments(text), []
    for m in re.finditer(r"(if\s*\([^;{]*\)\s*)?__threadfence\s*\(\s*\)\s*;", code):
        kind = "acquire" if m.group(1) else "release"
        start, end = base._statement_span(text, m.start(), m.end())
        sites.append((kind, start, end, "" if (start, end) != (m.start(), m.end()) else ";"))
    return base._mutants("fence", text, sites)


def limit(text: str):
    """The seed's ``atomicInc`` limit: ``gridDim.x - 1`` becomes ``gridDim.x``, so the counter is
    left at gridDim.x."""
    code, sites = base._blank_comments(text), []
    for start, open_, close, name in base._calls(code, r"atomicInc"):
        last = base._split_top(code, open_ + 1, close, ",")[-1]
        if m := re.search(r"(\s*-\s*1)\s*$", code[last[0]:last[1]]):
            sites.append(("seed", last[0] + m.start(1), last[0] + m.end(1), ""))
    return base._mutants("limit", text, sites)


def offset(text: str):
    """A block's offset into the partials read as block 0's: the ``blockIdx.x`` (kind row) or the
    loop's block (kind column) of a ``(size_t)... * C`` term replaced by 0."""
    code, sites = base._blank_comments(text), []
    pattern = (r"\(size_t\)\s*(?P<a>[\w.]+)\s*\*\s*C\b|"
               r"\(size_t\)\s*C\s*\*\s*(?P<b>[\w.]+)")
    for m in re.finditer(pattern, code):
        name = m.group("a") or m.group("b")
        if name == "C" or name.isdigit():
            continue
        at = m.start("a") if m.group("a") else m.start("b")
        kind = "row" if name == "blockIdx.x" else "column"
        sites.append((kind, at, at + len(name), "0"))
    return base._mutants("offset", text, sites)


def chunks(text: str):
    """Each thread's chunks made neighbours (the walk-through's scale_wide, lesson 09): every
    ``base + k * blockDim.x`` becomes ``base + threadIdx.x * (UNROLL - 1) + k``, i.e. (the
    block's first chunk) + threadIdx.x * UNROLL + k: the same chunks, each read and written once,
    but a warp's accesses at one k spread over 2 KiB. One mutant, every site changed together
    (changed alone, a chunk is missed, which the run sees anyway)."""
    code = base._blank_comments(text)
    sites = [m.span() for m in re.finditer(r"\bbase\s*\+\s*k\s*\*\s*blockDim\.x\b", code)]
    if not sites:
        return []
    mutated = text
    for start, end in reversed(sites):
        mutated = mutated[:start] + "base + threadIdx.x * (UNROLL - 1) + k" + mutated[end:]
    return [(f"chunks.neighbours@{text.count(chr(10), 0, sites[0][0]) + 1}", mutated)]


def rstd(text: str):
    """norm without rstd: a ``* r`` factor dropped from a statement that adds into a sum other
    than the dot product (lesson 10's dweight sums: ``sum[k] += inp_k * r * dout_k``)."""
    code, sites = base._blank_comments(text), []
    for m in re.finditer(r"^[ \t]*(?!dot\b)[\w\[\].]+\s*\+=[^;]*;", code, re.M):
        if f := re.search(r"\s*\*\s*r\b(?!\w)", m.group(0)):
            sites.append(("norm", m.start() + f.start(), m.start() + f.end(), ""))
    return base._mutants("rstd", text, sites)


def operand(text: str):
    """The dot product reads one value twice: in ``dot += a * b * c`` the last factor becomes the
    one before it (lesson 10: ``dout * dout`` where ``dout * inp`` belongs)."""
    code, sites = base._blank_comments(text), []
    for m in re.finditer(r"\bdot\s*\+=([^;]*);", code):
        factors = base._split_top(code, m.start(1), m.end(1), "*")
        if len(factors) >= 3:
            (a, b), (c, d) = factors[-2], factors[-1]
            if code[a:b].strip() != code[c:d].strip():
                sites.append(("dot", c, d, " " + code[a:b].strip()))
    return base._mutants("operand", text, sites)


def layout(text: str):
    """A lane's columns as a block of its own (lane l takes columns l*ceil(C/32) up to the next
    lane's first) instead of one every 32: one loop at a time (kinds first, last). The numbers stay
    right; each warp load touches 32 sectors where 4 do (walk-through 2026-12, lesson 03)."""
    code, sites = base._blank_comments(text), []
    pattern = (r"for\s*\(\s*int\s+(\w+)\s*=\s*lane\s*;\s*\1\s*<\s*C\s*;\s*"
               r"\1\s*\+=\s*(?:WARP_SIZE|32)\s*\)")
    found = list(re.finditer(pattern, code))
    for k, m in enumerate(found):
        c = m.group(1)
        sites.append(("first" if k == 0 else "last", m.start(), m.end(),
                      f"for (int {c} = lane * ((C + 31) / 32); "
                      f"{c} < min(C, (lane + 1) * ((C + 31) / 32)); {c}++)"))
    return base._mutants("layout", text, sites)


base.SLIPS.update({"hint": hint, "staging": staging, "fence": fence, "limit": limit,
                   "offset": offset, "layout": layout, "banks": banks, "overwrite": overwrite,
                   "order": order, "narrow": narrow, "chunks": chunks, "rstd": rstd,
                   "operand": operand})
