"""Plausible learner slips, written into the instructor's solution of every kernel exercise.

Each slip class is a function ``text -> [(mutant id, mutated text), ...]``: it finds every site in
the CUDA text where the slip applies (comments are never touched), makes one mutant per site and
keeps at most :data:`CAP` of them, chosen deterministically (spread over the text, each kind of
site in turn). A mutant id is ``class.kind@line`` (the line of the solution text; ``#2`` for a
second site of a kind on one line), e.g. ``atomic.shared@27``.

The solution text is read from the notebooks at collection time: the cell whose check call
(``lesson04.check_v3_kernel(yours_v3)``, tagged ``exercise-check``) names the exercise gives the
variable, the cell tagged ``kernel-exercise`` that binds it gives the text, and
:func:`rmsnorm_lessons.course.student.solution_only` drops the markers and skeletons.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from _mutation_sources import check_function, solution_text  # noqa: F401 (the suite's names)

from rmsnorm_lessons.course import registry

#: mutants per class and exercise (the GPU test's time grows with it)
CAP = 2
CLASSES = ("barrier", "normalisation", "stride", "atomic", "shuffle", "tail", "width", "sign",
           "term")
#: the kinds of site within a class, in the order a class takes them when it has more than CAP
KINDS = ("syncthreads", "bar_sync", "mean", "loop", "index", "global", "shared", "ticket",
         "first", "last", "step", "whole", "row", "column", "load", "store", "bf16", "projection",
         "term2", "weight")
#: rounds a value to bf16 and back: what an fp32 location receives when bf16 is stored there
BF16 = "__bfloat162float(__float2bfloat16({}))"
#: narrower than 128 bits: the first 8 bytes move, the rest of the vector is zeros or unwritten
LOAD64_PACKED = """template <class T> __device__ Packed128<T> load64(const T* a) {
    Packed128<T> p = Packed128<T>::zeros(); *(uint2*)&p = *(const uint2*)a; return p;
}
template <class T> __device__ void store64(T* t, Packed128<T> v) { *(uint2*)t = *(uint2*)&v; }
"""
LOAD64_PLAIN = {
    "float4": """__device__ float4 load64(const float4* a) {
    float2 h = *(const float2*)a; return make_float4(h.x, h.y, 0.0f, 0.0f);
}
__device__ void store64(float4* t, float4 v) { *(float2*)t = make_float2(v.x, v.y); }
""",
    "uint4": """__device__ uint4 load64(const uint4* a) {
    uint2 h = *(const uint2*)a; return make_uint4(h.x, h.y, 0u, 0u);
}
"""}


@dataclass(frozen=True)
class Mutant:
    exercise: str  # the lesson's stem: "04_shared_memory"
    check: str  # "lesson04.check_v3_kernel"
    id: str  # "barrier.syncthreads@11"
    text: str

    @property
    def cls(self) -> str:
        return self.id.split(".")[0].split("@")[0]

    @property
    def kind(self) -> str:
        return self.id.split("@")[0]

    @property
    def node(self) -> str:
        return f"{self.exercise[:2]}-{self.id}"


# --- finding sites -----------------------------------------------------------------------------

def _blank_comments(text: str) -> str:
    """``text`` with every comment's characters replaced by spaces (positions kept)."""
    blank = lambda m: re.sub(r"[^\n]", " ", m.group(0))  # noqa: E731
    return re.sub(r"/\*.*?\*/|//[^\n]*", blank, text, flags=re.S)


def _close(code: str, open_at: int) -> int:
    """The position of the parenthesis closing the one at ``open_at``."""
    depth = 0
    for i in range(open_at, len(code)):
        depth += {"(": 1, ")": -1}.get(code[i], 0)
        if depth == 0:
            return i
    raise ValueError(f"unbalanced parenthesis at {open_at}")


def _split_top(code: str, start: int, end: int, sep: str) -> list[tuple[int, int]]:
    """Spans of ``code[start:end]`` split at ``sep`` outside parentheses and brackets."""
    spans, depth, begin = [], 0, start
    for i in range(start, end):
        ch = code[i]
        depth += 1 if ch in "([{<" and not (ch == "<" and code[i + 1:i + 2] in " =") else 0
        depth -= 1 if ch in ")]}>" and not (ch == ">" and code[i - 1:i] in " -=") else 0
        if ch == sep and depth == 0:
            spans.append((begin, i))
            begin = i + 1
    spans.append((begin, end))
    return spans


def _calls(code: str, names: str):
    """``(start, open paren, close paren, name)`` of each call of a function in ``names`` (a
    regular expression)."""
    for m in re.finditer(rf"\b({names})\s*\(", code):
        yield m.start(), m.end() - 1, _close(code, m.end() - 1), m.group(1)


def _for_headers(code: str):
    """``(start, [(init), (cond), (incr)] spans, body start)`` of every for loop."""
    for m in re.finditer(r"\bfor\s*\(", code):
        close = _close(code, m.end() - 1)
        parts = _split_top(code, m.end(), close, ";")
        if len(parts) == 3:
            yield m.start(), parts, close + 1


def _body_end(code: str, at: int) -> int:
    """Where the statement or block starting at ``at`` ends."""
    i = at
    while code[i].isspace():
        i += 1
    if code[i] != "{":
        return code.index(";", i) + 1
    depth = 0
    for j in range(i, len(code)):
        depth += {"{": 1, "}": -1}.get(code[j], 0)
        if depth == 0:
            return j + 1
    return len(code)


def _declared(code: str, types: str) -> set[str]:
    """Names declared as pointers to (or shared arrays of) ``types`` (a regular expression)."""
    pointers = re.findall(rf"\b(?:{types})\s*\*\s*(?:__restrict__\s+)?(\w+)", code)
    shared = re.findall(rf"__shared__\s+(?:{types})\s+(\w+)\s*\[", code)
    return set(pointers) | set(shared)


def _unit(loop: str, code: str) -> str:
    """The step of one thread's item in a for header (or an index's definition) ``loop``: a
    Packed128's size where the loop counts channels a vector at a time (``x128::size`` in it, or a
    stride defined from it: ``step = WARP_SIZE * x128::size``)."""
    strides = set(re.findall(r"\bint\s+(\w+)\s*=\s*WARP_SIZE\s*\*\s*x128::size", code))
    if "f128::size" in loop:
        return "f128::size"
    if "x128::size" in loop or any(re.search(rf"\b{v}\b", loop) for v in strides):
        return "x128::size"
    return "1"


# --- choosing sites and making mutants ---------------------------------------------------------

def _spread(n: int) -> list[int]:
    """0..n-1 in the order middle, first, last, quarters, ...: a few picks cover the text."""
    order, parts = ([n // 2] if n else []), 1
    while len(order) < n:
        for k in range(parts + 1):
            i = round(k * (n - 1) / parts) if parts else 0
            if i not in order:
                order.append(i)
        parts *= 2
    return order


def _choose(sites, cap: int = CAP):
    """At most ``cap`` of ``sites`` (``(kind, start, end, replacement)``), the kinds taken in turn,
    each kind's sites spread over the text; in text order."""
    by_kind: dict[str, list] = {}
    for site in sorted(sites, key=lambda s: (KINDS.index(s[0]), s[1])):
        by_kind.setdefault(site[0], []).append(site)
    queues = [[same[i] for i in _spread(len(same))] for same in by_kind.values()]
    chosen = []
    while len(chosen) < cap and any(queues):
        for q in queues:
            if q and len(chosen) < cap:
                chosen.append(q.pop(0))
    return sorted(chosen, key=lambda s: s[1])


def _mutants(cls: str, text: str, sites, preludes=None):
    """One mutant per chosen site (:func:`_choose`). ``preludes``: by a site's start, helpers its
    mutant calls, inserted after the text's ``#include``/``#define`` lines."""
    out, seen = [], {}
    for kind, start, end, new in _choose(sites):
        mutated = text[:start] + new + text[end:]
        prelude = (preludes or {}).get(start, "")
        if prelude:
            heads = list(re.finditer(r"^#(?:include|define)[^\n]*\n", mutated, re.M))
            at = heads[-1].end() if heads else 0
            mutated = mutated[:at] + prelude + mutated[at:]
        base = f"{cls}.{kind}@{text.count(chr(10), 0, start) + 1}"
        seen[base] = seen.get(base, 0) + 1
        out.append((base + (f"#{seen[base]}" if seen[base] > 1 else ""), mutated))
    return out


def _statement_span(text: str, start: int, end: int) -> tuple[int, int]:
    """The whole line when the statement ``text[start:end]`` is alone on it."""
    line_start = text.rfind("\n", 0, start) + 1
    line_end = text.find("\n", end)
    line_end = len(text) if line_end < 0 else line_end
    if not text[line_start:start].strip() and not text[end:line_end].strip():
        return line_start, min(line_end + 1, len(text))
    return start, end


# --- the slip classes --------------------------------------------------------------------------

def _shared_names(code: str) -> set[str]:
    """Arrays in shared memory: declared ``__shared__``, or pointers set from one of them."""
    names = set(re.findall(r"__shared__\s+[\w\s]+?\b(\w+)\s*(?:\[|;)", code))
    while True:
        more = {n for n, src in re.findall(r"\*\s*(\w+)\s*=\s*\(?\s*(\w+)", code)
                if src in names} - names
        if not more:
            return names
        names |= more


def _unseen_barrier(code: str, start: int, end: int, barriers) -> bool:
    """True where removing the barrier at ``code[start:end]`` cannot be observed: it is in no
    loop, the code since the barrier before it writes only shared arrays (no global store, no
    fence), and none of those arrays is named before the next barrier (v5's and v6's barrier
    after zeroing: warp 0 reads the sums only after the row loop's own barriers)."""
    if any(a < start < _body_end(code, b) for a, _, b in _for_headers(code)):
        return False
    before = code[max([e for s, e in barriers if e <= start], default=0):start]
    after = code[end:min([s for s, e in barriers if s >= end], default=len(code))]
    shared = _shared_names(code)
    arrays = set(re.findall(r"\bstore128\w*\s*\(\s*(\w+)", before)) | set(
        re.findall(r"\b(\w+)\s*\[[^\]]*\]\s*[+\-*/]?=(?!=)", before)) | set(
        re.findall(r"\batomic\w+\s*\(\s*&?\s*(\w+)", before))
    if "__threadfence" in before or any(w not in shared for w in arrays) or not arrays:
        return False
    return not any(re.search(rf"\b{w}\b", after) for w in arrays)


def barrier(text: str):
    """A barrier removed: ``__syncthreads();`` or a named barrier (``bar.sync``) statement (not
    one whose removal no run could see, :func:`_unseen_barrier`)."""
    code, sites = _blank_comments(text), []
    pattern = r"__syncthreads\s*\(\s*\)\s*;|asm\s+volatile\s*\(\s*\"bar(?:rier)?\.sync[^;]*;"
    barriers = [m.span() for m in re.finditer(pattern, code)]
    for m in re.finditer(pattern, code):
        if _unseen_barrier(code, m.start(), m.end(), barriers):
            continue
        kind = "syncthreads" if m.group(0).startswith("__sync") else "bar_sync"
        start, end = _statement_span(text, m.start(), m.end())
        sites.append((kind, start, end, "" if (start, end) != (m.start(), m.end()) else ";"))
    return _mutants("barrier", text, sites)


def normalisation(text: str):
    """A mean over C + 1 channels: ``/ C`` (``/= C``, ``1.0f / C``) becomes ``/ (C + 1)``."""
    code = _blank_comments(text)
    sites = [("mean", m.start(2), m.end(2), "(C + 1)")
             for m in re.finditer(r"/=?\s*(\(\s*float\s*\)\s*)?(C)\b(?!\s*[\[(.])", code)]
    return _mutants("normalisation", text, sites)


def stride(text: str):
    """A loop's stride one element (or one vector) too long, or an index one element or one
    vector past the right one."""
    code, sites = _blank_comments(text), []
    for _, (init, cond, incr), _ in _for_headers(code):
        s = code[incr[0]:incr[1]]
        unit = _unit(code[init[0]:incr[1]], code)
        if m := re.fullmatch(r"\s*(\w+)\s*\+\+\s*|\s*\+\+\s*(\w+)\s*", s):
            name = m.group(1) or m.group(2)
            sites.append(("loop", incr[0], incr[1], f" {name} += 2"))
        elif m := re.fullmatch(r"(\s*\w+\s*\+=\s*)(.+?)(\s*)", s, re.S):
            sites.append(("loop", incr[0], incr[1], f"{m.group(1)}{m.group(2)} + {unit}"))
    pointers = _declared(code, r"float|__nv_bfloat16|float4|uint4|int4")
    for m in re.finditer(r"\b(\w+)\s*\[", code):
        if m.group(1) not in pointers or re.match(r"\s*\]", code[m.end():]):
            continue
        close = code.index("]", m.end())
        sites.append(("index", close, close, " + 1"))
    for start, open_, close, name in _calls(code, r"load128(?:cs)?|store128(?:cg|cs)?"):
        first = _split_top(code, open_ + 1, close, ",")[0]
        target = re.match(r"\s*(\w+)\s*\+", code[first[0]:first[1]])
        if target and target.group(1) in pointers:
            unit = ("x128::size" if target.group(1) in _declared(code, "__nv_bfloat16")
                    else "f128::size")
            sites.append(("index", first[1], first[1], f" + {unit}"))
    return _mutants("stride", text, sites)


def atomic(text: str):
    """An atomic made plain: ``atomicAdd(&x, v)`` becomes ``x += v``, ``t = atomicInc(p, l)`` a
    read and a write of ``*p``."""
    code, sites = _blank_comments(text), []
    shared = set(re.findall(r"__shared__\s+\w+\s+(\w+)", code))
    for start, open_, close, name in _calls(code, r"atomicAdd|atomicInc"):
        args = [code[a:b].strip() for a, b in _split_top(code, open_ + 1, close, ",")]
        if len(args) != 2:
            continue
        before = code[:start].rstrip()
        if name == "atomicAdd" and before[-1:] in (";", "{", "}", ")") and \
                code[close + 1:].lstrip().startswith(";"):
            target = args[0][1:].strip() if args[0].startswith("&") else f"*({args[0]})"
            kind = "shared" if re.match(r"\w*", target.lstrip("*(")).group(0) in shared \
                else "global"
            sites.append((kind, start, close + 1, f"{target} += {args[1]}"))
        elif name == "atomicInc" and (m := re.search(r"(\w+)\s*=\s*$", before)):
            end = code.index(";", close) + 1
            ticket, counter, limit = m.group(1), args[0], args[1]
            sites.append(("ticket", m.start(), end,
                          f"{ticket} = *{counter}; *{counter} = ({ticket} >= {limit}) ? 0 : "
                          f"{ticket} + 1;"))
    return _mutants("atomic", text, sites)


def shuffle(text: str):
    """A shuffle offset skipped: the butterfly loop starting at 8 (offset 16 skipped) or stopping
    before offset 1, a ``__shfl_xor_sync`` step removed, or the whole warp sum skipped (this lane's
    part used as the row's sum)."""
    code, sites = _blank_comments(text), []
    in_loops = []
    for _, (init, cond, incr), body in _for_headers(code):
        end = _body_end(code, body)
        if "__shfl_xor_sync" not in code[body:end]:
            continue
        in_loops.append((body, end))
        if m := re.search(r"=\s*(16)\b", code[init[0]:init[1]]):
            sites.append(("first", init[0] + m.start(1), init[0] + m.end(1), "8"))
        if m := re.search(r">\s*(0)\b", code[cond[0]:cond[1]]):
            sites.append(("last", cond[0] + m.start(1), cond[0] + m.end(1), "1"))
    for m in re.finditer(r"[^;{}]*__shfl_xor_sync\s*\([^;]*;", code):
        if not any(a <= m.start() < b for a, b in in_loops):
            start, end = _statement_span(text, m.start() + len(m.group(0)) -
                                         len(m.group(0).lstrip()), m.end())
            sites.append(("step", start, end, ""))
    for start, open_, close, name in _calls(code, r"warp_reduce_sum"):
        sites.append(("whole", start, close + 1, f"({code[open_ + 1:close].strip()})"))
    return _mutants("shuffle", text, sites)


def tail(text: str):
    """The last row or column (or vector of columns) dropped: ``row < N`` becomes ``row + 1 <
    N``, ``c < C`` becomes ``c + 1 < C`` or ``c + x128::size < C`` where c counts vectors."""
    code, sites = _blank_comments(text), []
    headers = [(init[0], cond[1], code[init[0]:incr[1]]) for _, (init, cond, incr), _ in
               _for_headers(code)]
    pattern = r"\b(\w+)(\s*)(<|>=)\s*(N|C|n4|p\.chunks)\b(?!\s*[\[(.])"
    for m in re.finditer(pattern, code):
        lhs, bound = m.group(1), m.group(4)
        if lhs.isdigit() or lhs in ("return", "int"):
            continue
        unit = "1"
        if bound == "C":
            header = next((h for a, b, h in headers if a <= m.start() < b), None)
            definition = re.findall(rf"\bint\s+{lhs}\s*=([^;]*);", code[:m.start()])
            unit = _unit(header if header is not None else
                         (definition[-1] if definition else ""), code)
        kind = "row" if bound == "N" else "column"
        sites.append((kind, m.end(1), m.end(1), f" + {unit}"))
    return _mutants("tail", text, sites)


def width(text: str):
    """A wrong dtype width: a 128-bit load or store moving 8 bytes instead (a helper of the
    mutant's own, as a learner would write one with uint2), or bf16 stored where fp32 is
    expected (the value rounded to bf16 on its way into an fp32 array)."""
    code, sites, preludes = _blank_comments(text), [], {}
    for start, open_, close, name in _calls(code, r"load128(?:cs)?|store128(?:cg|cs)?"):
        kind = "load" if name.startswith("load") else "store"
        sites.append((kind, start, open_, f"{kind}64"))
        preludes[start] = LOAD64_PACKED
    for vector in LOAD64_PLAIN:
        names = _declared(code, vector)
        cast = rf"reinterpret_cast\s*<\s*const\s+{vector}\s*\*\s*>"
        for start, open_, close, name in _calls(code, r"__ldg|__ldcg|__ldcs"):
            arg = code[open_ + 1:close].strip()
            if re.match(cast, arg) or re.match(r"\w*", arg).group(0) in names:
                sites.append(("load", start, open_, "load64"))
                preludes[start] = LOAD64_PLAIN[vector]
        for m in re.finditer(r"\b(\w+)\s*\[([^\]]+)\]", code):
            if m.group(1) not in names:
                continue
            after = code[m.end():]
            if re.match(r"\s*=[^=]", after) and vector == "float4":
                end = m.end() + after.index(";")
                value = code[m.end():end].strip()[1:].strip()
                sites.append(("store", m.start(), end, f"store64({m.group(1)} + {m.group(2)}, "
                                                        f"{value})"))
                preludes[m.start()] = LOAD64_PLAIN[vector]
            elif not re.match(r"\s*[+\-*/]?=", after):
                sites.append(("load", m.start(), m.end(), f"load64({m.group(1)} + {m.group(2)})"))
                preludes[m.start()] = LOAD64_PLAIN[vector]
    floats = _declared(code, "float")
    for m in re.finditer(r"\b(\w+)\s*\[[^\]]+\]\s*(\+?=)(?!=)\s*([^;]+);", code):
        if m.group(1) in floats and not re.fullmatch(r"[\d.]+f?", m.group(3).strip()):
            sites.append(("bf16", m.start(3), m.end(3), BF16.format(m.group(3).strip())))
    for start, open_, close, name in _calls(code, r"atomicAdd"):
        parts = _split_top(code, open_ + 1, close, ",")
        target = re.match(r"\s*&?\s*(\w+)", code[parts[0][0]:parts[0][1]])
        if len(parts) == 2 and target and target.group(1) in floats:
            a, b = parts[1]
            sites.append(("bf16", a, b, " " + BF16.format(code[a:b].strip())))
    return _mutants("width", text, sites, preludes)


def sign(text: str):
    """The projection's sign flipped: term 2 added instead of subtracted, ``dnorm - norm * mean``
    becoming ``dnorm + norm * mean`` (the slip of the issue's wrong v1)."""
    code = _blank_comments(text)
    sites = [("projection", m.start(1), m.end(1), "+")
             for m in re.finditer(r"\s(-)\s*norm\b\s*\*", code)]
    return _mutants("sign", text, sites)


def term(text: str):
    """A term dropped: term 2 left out of dinp (``dnorm - norm * mean`` becoming ``dnorm``), or
    the weight left out of the row's dot product (``weight[c] * dout[c] * inp[c]`` becoming
    ``dout[c] * inp[c]``)."""
    code, sites = _blank_comments(text), []
    for m in re.finditer(r"\s-\s*norm\b\s*\*\s*\w+", code):
        sites.append(("term2", m.start(), m.end(), ""))
    for m in re.finditer(r"\+=\s*(weight\s*\[[^\]]*\]\s*\*\s*)\w+\s*\[", code):
        sites.append(("weight", m.start(1), m.end(1), ""))
    return _mutants("term", text, sites)


SLIPS = {"barrier": barrier, "normalisation": normalisation, "stride": stride, "atomic": atomic,
         "shuffle": shuffle, "tail": tail, "width": width, "sign": sign, "term": term}
from _mutations_extra import EXTRA  # noqa: E402 (one lesson's slips, into SLIPS; it uses the above)


def mutants_of(lesson: registry.Lesson) -> list[Mutant]:
    """Every class's mutants of ``lesson``'s kernel exercise, class by class (its lesson's last)."""
    text = solution_text(lesson)
    return [Mutant(lesson.stem, lesson.kernel_exercise, mutant_id, mutated)
            for cls in CLASSES + EXTRA.get(lesson.stem, ()) for mutant_id, mutated in
            SLIPS[cls](text)]


def all_mutants() -> list[Mutant]:
    return [m for lesson in registry.kernel_exercises() for m in mutants_of(lesson)]
