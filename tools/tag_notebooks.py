#!/usr/bin/env python3
"""Tag every machine-dependent code cell of notebooks/ with ``nbval-ignore-output``; re-runnable.

Strict nbval (``pytest --nbval notebooks``, what ``make test`` runs) compares each cell's output
with the one committed in the notebook, which was made on an H200. A cell whose output depends on
the machine (a timing, the GPU or its absence, a path, the nvcc release, a widget's banner) must
carry the ``nbval-ignore-output`` tag; everything else is compared. Small machine numbers inside
otherwise fixed text are normalised by ``nbval_sanitize.cfg`` instead.

    python3 tools/tag_notebooks.py            # add the tag where a rule says so (prints what
    changed) python3 tools/tag_notebooks.py --check    # change nothing; exit 1 listing untagged
    cells

The rules (:func:`reasons`) read a cell's source and its committed outputs. Only the metadata tags
are written; sources and outputs are never touched. Each notebook is read and written under an
exclusive lock on /tmp/notebooks.lock (others edit the notebooks too), with ``indent=1`` and a final
newline.
"""
from __future__ import annotations

import argparse
import fcntl
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TAG = "nbval-ignore-output"
LOCK = Path("/tmp/notebooks.lock")

# what a cell's source calls that prints something this machine decides
SOURCE_RULES = {
    "the set-up banner (GPU or not)": r"\bnotebook\.setup\(",
    "the command line (info, inspect)": r"\bcli\.main\(",
    "this GPU's facts or the saved H200's":
        r"\bfacts_or_fallback\(|\bgpu\.facts\(|\bgpu\.require\(|\bcopy_bandwidth",
    "the nvcc release (SASS, registers)":
        r"\bsass\.|\bbuild\.resources\(|\bcompile_file\(|\bbuild\.ptx\(",
    "a widget (its banner says GPU or not)": r"\bwidgets\.\w+\(",
    "a timing": r"\bbench\.|%%?timeit|\bperf_counter\(|\btime\.time\(",
    "a kernel exercise's check (it runs the kernel only where a GPU is)":
        r"\bcheck_warp_sum\(|\bcheck_v\d_kernel\(|\bcheck_v\d_draft\(",
    "a measurement beside a guess": r"\bpredict\.versus\(",
    "an opening, a diagnosis or what changed (measured here, or the saved run's)":
        r"\bopening\(|\bwhat_changed\(|\bcheck_diagnosis\(|\bdiagnose\.check\(|\.measured\(",
}
# cells tagged so: the tag says what their output depends on
TAG_RULES = {
    "reveal": "a reveal cell (ours is shown only where the check passed: a GPU ran it)",
    # issue 41: an investigation's cells print this GPU's figures, or the saved run's without one
    "opening": "an opening (the last rung measured here, or the saved run's without a GPU)",
    "diagnosis": "a diagnosis verdict (it quotes the opening's figures, measured or saved)",
    "what-changed": "what changed (two openings, measured here or saved)",
}
# a prediction cell prints the learner's own numbers ("0.8 ms"): no output rule applies to it
PREDICTION = "prediction"
# what committed output text shows that another machine would print differently
OUTPUT_RULES = {
    "a timing": r"\b\d+(\.\d+)?\s?(ms|us|µs|ns)\b|\bGB/s\b|\bTFLOP/s\b",
    "a device": r"\bNVIDIA\b|\bH200\b|\bNo GPU here\b|\bneeds a GPU\b|\bsaved facts\b",
    "a path": r"(?<![\w.])/(work|home|tmp|opt|usr|root|var)/|site-packages|\.venv\b",
    "an address": r"\b0x[0-9a-fA-F]{10,}\b",  # a pointer, not a 32-bit mask
}
# a gpu cell runs only on a GPU; its floats come from random inputs and atomics in any order
GPU_FLOAT = r"\d\.\d|\de-\d"


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else (value or "")


def output_text(cell: dict) -> str:
    parts = []
    for out in cell.get("outputs", []):
        parts.append(_text(out.get("text")))
        data = out.get("data", {})
        parts.append(_text(data.get("text/plain")))
        parts.append(_text(out.get("evalue")))
    return "\n".join(parts)


def reasons(cell: dict) -> list[str]:
    """Why this code cell's output depends on the machine ([] for a deterministic cell)."""
    src = _text(cell.get("source"))
    out = output_text(cell)
    tags = cell.get("metadata", {}).get("tags", [])
    found = [why for why, rx in SOURCE_RULES.items() if re.search(rx, src)]
    found += [why for tag, why in TAG_RULES.items() if tag in tags]
    if PREDICTION not in tags:
        found += [f"its output shows {why}" for why, rx in OUTPUT_RULES.items()
                  if re.search(rx, out)]
    if "gpu" in tags and re.search(GPU_FLOAT, out):
        found.append("a gpu cell printing measured numbers")
    return found


def untagged(nb: dict) -> list[tuple[int, list[str]]]:
    """(code cell number as nbval counts it, reasons) for each cell that needs the tag and lacks
    it."""
    missing, n = [], -1
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        n += 1
        why = reasons(cell)
        if why and TAG not in cell.get("metadata", {}).get("tags", []):
            missing.append((n, why))
    return missing


def tag(path: Path) -> list[tuple[int, list[str]]]:
    """Add the tag where :func:`reasons` asks for it; read and write under the lock."""
    LOCK.touch(exist_ok=True)
    with open(LOCK) as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        nb = json.loads(path.read_text(encoding="utf-8"))
        missing = untagged(nb)
        if missing:
            code = [c for c in nb["cells"] if c.get("cell_type") == "code"]
            for n, _ in missing:
                code[n].setdefault("metadata", {}).setdefault("tags", []).append(TAG)
            with open(path, "w", encoding="utf-8") as f:
                json.dump(nb, f, indent=1, ensure_ascii=False)
                f.write("\n")
    return missing


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("notebooks", nargs="*", type=Path, help="default: notebooks/*.ipynb")
    ap.add_argument("--check", action="store_true",
                    help="change nothing; exit 1 if a cell lacks its tag")
    args = ap.parse_args(argv)
    paths = args.notebooks or sorted((ROOT / "notebooks").glob("*.ipynb"))
    bad = 0
    for path in paths:
        if args.check:
            missing = untagged(json.loads(path.read_text(encoding="utf-8")))
        else:
            missing = tag(path)
        for n, why in missing:
            bad += 1
            print(f"{path.name} cell {n}: {'needs' if args.check else 'tagged'} {TAG}: "
                  f"{'; '.join(why)}")
    if args.check and bad:
        print(f"{bad} machine-dependent cells lack {TAG}: run python3 tools/tag_notebooks.py",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
