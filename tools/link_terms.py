"""Link the first use of each reference-card term in every lesson to the card.

    python tools/link_terms.py                 # link the registry's lessons in place
    python tools/link_terms.py --check         # exit 1, listing each lesson's unlinked terms
    python tools/link_terms.py NB.ipynb ...    # other notebooks (the card must sit beside them)

A term's *first use* in a notebook is its first match in a markdown cell, outside headings, code
(fenced blocks and inline spans), math, HTML and existing links; it becomes
``[text](reference_card.md#anchor)``. An inline code span that is exactly a SASS opcode
(`` `LDG.E.128` ``) counts as a use and is linked whole. A term already linked anywhere in the
notebook's markdown is left alone, so a second run changes nothing. The anchors are the card's
``<a id="...">`` tags (notebooks/reference_card.md); a term whose anchor the card lacks is refused.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CARD_NAME = "reference_card.md"
CARD = ROOT / "notebooks" / CARD_NAME

#: opcode (as the checks and nvdisasm spell it) -> the card's anchor
OPCODES = {
    "LDGSTS": "sass-ldgsts", "LDG": "sass-ldg", "STG": "sass-stg", "LDS": "sass-lds",
    "STS": "sass-sts", "LDL": "sass-ldl", "STL": "sass-ldl", "ATOMS": "sass-atoms",
    "ATOMG": "sass-atomg", "ATOM": "sass-atom", "REDUX": "sass-redux", "REDG": "sass-red",
    "RED": "sass-red", "SHFL": "sass-shfl", "BAR": "sass-bar", "WARPSYNC": "sass-warpsync",
    "MEMBAR": "sass-membar", "FENCE": "sass-fence",
}
_OPS = "|".join(sorted(OPCODES, key=len, reverse=True))
OPCODE = re.compile(rf"\b(?P<op>{_OPS})(?:\.[A-Z0-9_]+)*(?:\.\.\.)?(?![\w.])")

#: (anchor, pattern) in the order they are tried: a longer term before a shorter one inside it
TERMS: tuple[tuple[str, str], ...] = (
    ("bank-conflict", r"(?i:\bbank[- ]conflicts?\b)"),
    ("named-barrier", r"(?i:\bnamed barriers?\b)"),
    ("mbarrier", r"\bmbarriers?\b"),
    ("cluster", r"(?i:\b(?:thread[- ]block )?clusters?\b)"),
    ("gpc", r"\bGPCs?\b"),
    ("shared-memory", r"(?i:\bshared[- ]memory\b)"),
    ("local-memory", r"(?i:\blocal memory\b|\bspill(?:s|ed|ing)?\b)"),
    ("dram", r"\bDRAM\b|\bHBM\w*|(?i:\bdevice memory\b|\bglobal memory\b)"),
    ("block", r"(?i:\bthread blocks?\b)|\bCTAs?\b|(?i:\bblocks?\b)"),
    ("thread", r"(?i:\bthreads?\b)"),
    ("warp", r"(?i:\bwarps?\b)"),
    ("lane", r"(?i:\blanes?\b)"),
    ("grid", r"(?i:\bgrids?\b)"),
    ("sm", r"\bSMs?\b"),
    ("occupancy", r"(?i:\boccupancy\b)"),
    ("coalescing", r"(?i:\b(?:un)?coalesc(?:e|es|ed|ing)\b)"),
    ("sector", r"(?i:\bsectors?\b)"),
    ("bank", r"(?i:\bbanks?\b)"),
    # "registers your text" is the verb: a noun is not followed by its object
    ("register", r"(?i:\bregisters?\b(?!\s+(?:your|the|its?|them|an?|this|that)\b))"),
    ("l1", r"\bL1\b"),
    ("l2", r"\bL2\b"),
    ("sass", r"\bSASS\b"),
    ("ptx", r"\bPTX\b"),
)
_TERM = re.compile("|".join(f"(?P<t{i}>{p})" for i, (_, p) in enumerate(TERMS))
                   + f"|{OPCODE.pattern}")

#: what is never prose: fenced code, headings, comments, math, links and images, URLs, HTML tags,
#: inline code (the group ``code``: a span that is only an opcode is still linkable)
_PROTECTED = re.compile(
    r"^(?P<fence>```|~~~)[\s\S]*?^(?P=fence)[^\n]*$"
    r"|^[ \t]{0,3}#{1,6}[ \t].*$"
    r"|<!--[\s\S]*?-->"
    r"|\$\$[\s\S]*?\$\$|\$[^$\n]+\$"
    r"|!?\[(?:[^\[\]\n]|\[[^\]\n]*\])*\]\([^)\n]*\)"
    r"|<https?://[^>\s]+>|https?://[^\s)]+"
    r"|</?[A-Za-z][^>\n]*>"
    r"|(?P<ticks>`+)(?P<code>.+?)(?P=ticks)", re.M)
_LINKED = re.compile(rf"\]\({re.escape(CARD_NAME)}#([\w-]+)\)")


def card_anchors(card: Path = CARD) -> set[str]:
    """The anchors the card defines (its ``<a id="...">`` tags)."""
    return set(re.findall(r"<a id=\"([\w-]+)\"></a>", card.read_text()))


def linked_anchors() -> set[str]:
    """Every anchor this tool may link to."""
    return {a for a, _ in TERMS} | set(OPCODES.values())


def _anchor(m: re.Match) -> str:
    if m.group("op"):
        return OPCODES[m.group("op")]
    return TERMS[int(m.lastgroup[1:])][0]


def _uses(text: str):
    """``(start, end, anchor, is_code)`` of every use of a term in a markdown cell's text."""
    pos = 0
    for p in list(_PROTECTED.finditer(text)) + [None]:
        stop = p.start() if p else len(text)
        for m in _TERM.finditer(text, pos, stop):
            yield m.start(), m.end(), _anchor(m), False
        if p is None:
            break
        code = p.group("code")
        if code is not None:
            op = OPCODE.fullmatch(code.strip())
            if op:
                yield p.start(), p.end(), OPCODES[op.group("op")], True
        pos = p.end()


#: cells another tool renders (tools/colab_links.py's Colab/Binder set-up): left as it writes them
RENDERED = ("colab.research.google.com", "mybinder.org")


def _markdown_cells(nb: dict):
    return [c for c in nb.get("cells", []) if c.get("cell_type") == "markdown"
            and not any(mark in _text(c) for mark in RENDERED)]


def _text(cell) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def link_notebook(nb: dict) -> tuple[dict, list[str]]:
    """``nb`` with the first use of each unlinked term linked (in place) and the anchors linked."""
    cells = _markdown_cells(nb)
    done = {a for c in cells for a in _LINKED.findall(_text(c))}
    added = []
    for cell in cells:
        text = _text(cell)
        out, pos = [], 0
        for start, end, anchor, _ in _uses(text):
            if anchor in done:
                continue
            out.append(text[pos:start])
            out.append(f"[{text[start:end]}]({CARD_NAME}#{anchor})")
            pos = end
            done.add(anchor)
            added.append(anchor)
        if pos:
            out.append(text[pos:])
            cell["source"] = "".join(out).splitlines(keepends=True)
    return nb, added


def missing_links(nb: dict) -> list[str]:
    """The anchors of terms the notebook's markdown uses but never links, in order of first use."""
    cells = _markdown_cells(nb)
    done = {a for c in cells for a in _LINKED.findall(_text(c))}
    missing = []
    for cell in cells:
        for _, _, anchor, _ in _uses(_text(cell)):
            if anchor not in done and anchor not in missing:
                missing.append(anchor)
    return missing


def _default_notebooks() -> list[Path]:
    sys.path.insert(0, str(ROOT))
    from rmsnorm_lessons.course.registry import LESSONS

    return [lesson.path for lesson in LESSONS]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebooks", nargs="*", type=Path,
                        help="notebooks (default: every lesson of the lesson registry, "
                             "rmsnorm_lessons/course/registry.py)")
    parser.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 if a term's first use is not linked")
    args = parser.parse_args(argv)
    paths = args.notebooks or _default_notebooks()
    for path in paths:
        if not path.is_file():
            parser.error(f"notebooks: {path} is not a file")
        card = path.parent / CARD_NAME
        if not card.is_file():
            parser.error(f"notebooks: {path} has no {CARD_NAME} beside it to link to")
        absent = sorted(linked_anchors() - card_anchors(card))
        if absent:
            parser.error(f"{card}: no anchor for {', '.join(absent)}")
    unlinked = 0
    for path in paths:
        nb = json.loads(path.read_text())
        if args.check:
            missing = missing_links(nb)
            if missing:
                unlinked += len(missing)
                print(f"{path.name}: not linked at first use: {', '.join(missing)}")
            continue
        nb, added = link_notebook(nb)
        if added:
            with open(path, "w") as f:
                json.dump(nb, f, indent=1, ensure_ascii=False)
                f.write("\n")
            print(f"{path.name}: linked {', '.join(added)}")
    if args.check:
        if unlinked:
            print(f"{unlinked} first uses without a link: run python tools/link_terms.py",
                  file=sys.stderr)
            return 1
        print(f"every card term is linked at its first use in {len(paths)} notebooks")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
