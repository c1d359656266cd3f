"""The reference card (notebooks/reference_card.md) and tools/link_terms.py, which links each
term's first use in a lesson to it (CPU)."""
import importlib.util
import json
import re
from fnmatch import fnmatch
from pathlib import Path

import pytest

try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

from rmsnorm_lessons.course.registry import LESSONS

ROOT = Path(__file__).resolve().parent.parent
CARD = ROOT / "notebooks" / "reference_card.md"

#: the opcodes of the Hopper instruction set table (CUDA Binary Utilities, "Instruction Set
#: Reference"): what tells an opcode apart from the other capitals in the checks' messages
HOPPER_OPCODES = frozenset("""
FADD FADD32I FCHK FFMA32I FFMA FMNMX FMUL FMUL32I FSEL FSET FSETP FSWZADD MUFU HADD2 HADD2_32I
HFMA2 HFMA2_32I HMMA HMNMX2 HMUL2 HMUL2_32I HSET2 HSETP2 DADD DFMA DMMA DMUL DSETP BMMA BMSK BREV
FLO IABS IADD IADD3 IADD32I IDP IDP4A IMAD IMMA IMNMX IMUL IMUL32I ISCADD ISCADD32I ISETP LEA LOP
LOP3 LOP32I POPC SHF SHL SHR VABSDIFF VABSDIFF4 VHMNMX VIADD VIADDMNMX VIMNMX VIMNMX3 F2F F2I I2F
I2I I2IP I2FP F2IP FRND MOV MOV32I MOVM PRMT SEL SGXT SHFL PLOP3 PSETP P2R R2P FENCE LD LDC LDG
LDGDEPBAR LDGMC LDGSTS LDL LDS LDSM STSM ST STG STL STS STAS SYNCS MATCH QSPC ATOM ATOMS ATOMG
REDAS REDG CCTL CCTLL ERRBAR MEMBAR CCTLT R2UR REDUX S2UR UBMSK UBREV UCGABAR_ARV UCGABAR_WAIT
UCLEA UF2FP UFLO UIADD3 UIMAD UISETP ULDC ULEA ULEPC ULOP ULOP3 ULOP32I UMOV UP2UR UPLOP3 UPOPC
UPRMT UPSETP UR2UP USEL USETMAXREG USGXT USHF USHL USHR VOTEU BGMMA HGMMA IGMMA QGMMA WARPGROUP
WARPGROUPSET UBLKCP UBLKPF UBLKRED UTMACCTL UTMACMDFLUSH UTMALDG UTMAPF UTMAREDG UTMASTG TEX TLD
TLD4 TMML TXD TXQ SUATOM SULD SURED SUST ACQBULK BMOV BPT BRA BREAK BRX BRXU BSSY BSYNC CALL
CGAERRBAR ELECT ENDCOLLECTIVE EXIT JMP JMX JMXU KILL NANOSLEEP PREEXIT RET RPCMOV WARPSYNC YIELD
B2R BAR CS2R DEPBAR GETLMEMBASE LEPC NOP PMTRIG S2R SETCTAID SETLMEMBASE VOTE
""".split()) | {"RED"}  # RED: the Ampere table's name of the reduction; the checks accept both
TOKEN = re.compile(r"\b[A-Z]{3,}[A-Z0-9]*(?:\.[A-Z0-9]+)*")


@pytest.fixture(scope="module")
def tool():
    spec = importlib.util.spec_from_file_location("link_terms", ROOT / "tools" / "link_terms.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _checks_opcodes() -> set[str]:
    names = set()
    package = ROOT / "rmsnorm_lessons"
    for path in sorted([*(package / "course" / "checking").glob("*.py"),
                        *(package / "lessons").rglob("*.py")]):
        for token in TOKEN.findall(path.read_text()):
            if token.split(".")[0] in HOPPER_OPCODES:
                names.add(token.split(".")[0])
    return names


def _card_opcodes() -> set[str]:
    rows = [line for line in CARD.read_text().splitlines() if re.match(r"\| <a id=\"sass-", line)]
    return {op for row in rows for op in re.findall(r"`([A-Z][A-Z0-9]+)`", row.split("|")[1])}


def test_every_anchor_the_tool_links_is_in_the_card(tool):
    anchors = tool.card_anchors()
    assert tool.linked_anchors() <= anchors, sorted(tool.linked_anchors() - anchors)
    assert len(set(re.findall(r'<a id="([\w-]+)"', CARD.read_text()))) == len(
        re.findall(r'<a id="', CARD.read_text())), "an anchor is defined twice"


def test_the_card_defines_every_opcode_the_checks_name(tool):
    named = _checks_opcodes()
    assert {"LDG", "STG", "ATOMS", "BAR", "MEMBAR", "SHFL"} <= named  # the scan finds them
    card = _card_opcodes()
    assert named <= card, f"opcodes the checks name that the card lacks: {sorted(named - card)}"
    assert card <= set(tool.OPCODES), sorted(card - set(tool.OPCODES))
    for op in card:
        assert op in HOPPER_OPCODES, f"{op} is not in the Hopper instruction set table"


def test_every_row_of_the_card_names_a_source():
    for line in CARD.read_text().splitlines():
        if line.startswith("| <a id="):
            cells = [c.strip() for c in line.strip("|").split("|")]
            assert len(cells) == 3 and all(cells), line
    words = len(re.findall(r"\w+", CARD.read_text()))
    assert words < 2000, f"the card is {words} words: keep it to one page"


def _notebook(cells):
    return {"cells": [{"cell_type": kind, "metadata": {}, "source": text.splitlines(True),
                       **({"outputs": [], "execution_count": None} if kind == "code" else {})}
                      for kind, text in cells],
            "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


SAMPLE = [
    ("markdown", "# One warp per row\n\nEach warp sums a row; a warp has 32 lanes.\n"),
    ("code", "# a warp here is code\nprint('warp')\n"),
    ("markdown", "The `warp` span and [the SM](https://example.org/sm) stay as they are.\n"
                 "```\nthread in a fence\n```\n"
                 "One thread per lane; the SASS shows `SHFL.BFLY` and then `SHFL.DOWN`.\n"
                 "It registers your text. Then the registers and a bank conflict, a bank.\n"),
]


def test_links_first_uses_only_and_twice_changes_nothing(tool, tmp_path, capsys):
    path = tmp_path / "sample.ipynb"
    path.write_text(json.dumps(_notebook(SAMPLE), indent=1) + "\n")
    (tmp_path / "reference_card.md").write_text(CARD.read_text())
    assert tool.main(["--check", str(path)]) == 1
    assert "warp, lane, thread, sass, sass-shfl" in capsys.readouterr().out
    assert tool.main([str(path)]) == 0
    once = path.read_text()
    assert tool.main([str(path)]) == 0 and path.read_text() == once
    assert tool.main(["--check", str(path)]) == 0
    nb = json.loads(once)
    first, code, second = ("".join(c["source"]) for c in nb["cells"])
    assert first.startswith("# One warp per row\n")  # headings stay plain
    assert "Each [warp](reference_card.md#warp) sums a row; a warp has 32 " in first
    assert "[lanes](reference_card.md#lane)" in first
    assert code == SAMPLE[1][1]
    assert "The `warp` span and [the SM](https://example.org/sm) stay" in second
    assert "```\nthread in a fence\n```" in second
    assert "One [thread](reference_card.md#thread) per lane; the " in second
    assert "[SASS](reference_card.md#sass)" in second
    assert "[`SHFL.BFLY`](reference_card.md#sass-shfl) and then `SHFL.DOWN`" in second
    assert "It registers your text. Then the [registers](reference_card.md#register)" in second
    assert "[bank conflict](reference_card.md#bank-conflict), a [bank](reference_card.md#bank)" \
        in second


def test_refuses_a_notebook_without_the_card_beside_it(tool, tmp_path):
    path = tmp_path / "sample.ipynb"
    path.write_text(json.dumps(_notebook(SAMPLE)))
    with pytest.raises(SystemExit):
        tool.main(["--check", str(path)])


def test_the_card_ships_in_the_wheel():
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    globs = data["package-data"]["rmsnorm_lessons.notebooks"]
    assert any(fnmatch(CARD.name, g) for g in globs), globs
    assert data["package-dir"]["rmsnorm_lessons.notebooks"] == "notebooks"


def test_shipped_lessons_link_every_term_at_first_use(tool, capsys):
    code = tool.main(["--check", *(str(lesson.path) for lesson in LESSONS)])
    assert code == 0, capsys.readouterr().out


def test_the_colab_cell_is_left_as_its_own_tool_renders_it(tool):
    colab = ("On **Binder** (no GPU: compiling, SASS): "
             "[![Binder](https://mybinder.org/badge_logo.svg)]"
             "(https://mybinder.org/v2/gh/o/r/main)")
    nb = {"cells": [{"cell_type": "markdown", "metadata": {}, "source": colab},
                    {"cell_type": "markdown", "metadata": {}, "source": "Read the SASS."}]}
    linked, _ = tool.link_notebook(nb)
    assert linked["cells"][0]["source"] == colab
    assert "reference_card.md#sass" in "".join(linked["cells"][1]["source"])
