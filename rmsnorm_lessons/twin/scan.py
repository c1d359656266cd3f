"""What the twin cannot model, found in the kernel's text before anything is compiled, and the
text g++ compiles.

:func:`refusals` names every construct the CPU twin does not model (inline PTX, cp.async,
clusters, mbarrier, bulk copies, ``__nanosleep``, ...) with its line: the twin then says "needs a
GPU: <construct> at line N" and never gives a verdict on it. :func:`for_gcc` rewrites the one
construct g++ cannot take as it stands (``extern __shared__ T name[]``) after the preprocessor has
run, keeping every line where it was.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

#: (what it is, the pattern that finds it in code without comments)
UNMODELLED = (
    ("inline PTX (asm)", r"\basm\b|\b__asm__\b|\b__asm\b"),
    ("cp.async", r"cp\.async|\b__pipeline_\w+|\bmemcpy_async\b|\bcuda::pipeline\b"),
    ("a thread-block cluster", r"__cluster_dims__|\bcluster_group\b|\bthis_cluster\b|"
                               r"\bcluster(?:Dim|Idx|_ctarank|_sync)\b"),
    ("mbarrier", r"\bmbarrier\b|\bcuda::barrier\b|\b__mbarrier\w*"),
    ("a bulk copy (TMA)", r"\bcp\.async\.bulk\b|\bCUtensorMap\b|\bcuTensorMap\w*"),
    ("__nanosleep", r"\b__nanosleep\b"),
    ("cooperative groups", r"\bcooperative_groups\b|\bcg::"),
    ("a clock read", r"\bclock(?:64)?\s*\(|\b__globaltimer\b"),
    ("__activemask (which lanes run together is the hardware's choice)", r"\b__activemask\b"),
    ("__match_any_sync / __match_all_sync", r"\b__match_(?:any|all)_sync\b"),
    ("tensor cores (wmma / mma)", r"\bwmma::|\bnvcuda::"),
    ("__half (fp16)", r"\bcuda_fp16\.h\b|\b__half2?\b"),
    ("a texture or surface", r"\btex[123]D\w*\s*[<(]|\bsurf[123]D\w*\s*[<(]|\btexture\s*<"),
    ("__constant__ memory", r"\b__constant__\b"),
    ("a launch from inside a kernel", r"<<<"),
    ("a __device__ variable (memory the shadow does not track)",
     r"^\s*(?:static\s+)?__device__\s+(?!__forceinline__|inline|__noinline__)[\w:<>,\s\*]+?\b\w+"
     r"\s*(?:\[[^\]]*\]\s*)*(?:=[^;(]*)?;"),
)


@dataclass(frozen=True)
class Refusal:
    """A construct the twin does not model: what, and where (file label and line)."""

    construct: str
    file: str
    line: int

    def sentence(self, own: str | None = None) -> str:
        place = f"line {self.line}" if self.file == own else f"{self.file}:{self.line}"
        return f"needs a GPU: {self.construct} at {place}"


def blank_comments(text: str) -> str:
    """``text`` with comments and string literals blanked (newlines kept, so lines stay)."""
    keep = lambda m: re.sub(r"[^\n]", " ", m.group(0))  # noqa: E731
    return re.sub(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"', keep, text, flags=re.S)


def _label(text: str, default: str) -> tuple[str, int]:
    """The file name a leading ``#line 1 "name"`` gives the text, and the line its body starts."""
    m = re.match(r'#line\s+1\s+"([^"]+)"\s*\n', text)
    return (m.group(1), 1) if m else (default, 0)


def refusals(text: str, name: str, includes: dict | None = None) -> list[Refusal]:
    """Every unmodelled construct in ``text`` (named ``name``; a leading ``#line 1 "label"`` names
    it by its label) and in the files it includes (``{path: text}``), in order of place."""
    found = []
    label, skip = _label(text, name)
    sources = [(label, text, skip)] + [(Path(p).name, t, 0) for p, t in (includes or {}).items()]
    for file, source, skip_lines in sources:
        code = blank_comments(source)
        for construct, pattern in UNMODELLED:
            for m in re.finditer(pattern, code, re.M):
                line = code.count("\n", 0, m.start()) + 1 - skip_lines
                found.append(Refusal(construct, file, line))
    seen, out = set(), []
    for r in sorted(found, key=lambda r: (r.file != label, r.file, r.line)):
        if (r.construct, r.file) not in seen:
            seen.add((r.construct, r.file))
            out.append(r)
    return out


_ATTR = r"(?:__attribute__\s*\(\(.*?\)\)\s*)*"
_EXTERN_SHARED = re.compile(
    rf"\bextern\s+{_ATTR}__twin_shared__\s+{_ATTR}([A-Za-z_][\w:<>\s]*?)\s+{_ATTR}(\w+)\s*"
    rf"\[\s*\]\s*;")
SHARED_MARK = "__twin_shared__"
STATIC_SHARED = 'static __attribute__((section("twin_shared")))'


def for_gcc(preprocessed: str) -> str:
    """g++'s preprocessed text (made with ``-D__shared__=__twin_shared__``) with each ``extern
    __shared__ T name[];`` made a pointer to the launch's dynamic shared memory and every other
    ``__shared__`` a static in the section the shadow knows; nothing moves to another line."""
    text = _EXTERN_SHARED.sub(
        lambda m: f"{m.group(1)}* const {m.group(2)} = ({m.group(1)}*)twin_dynamic_shared();",
        preprocessed)
    return text.replace(SHARED_MARK, STATIC_SHARED)
