"""The README's benchmark (figure, sentence, table, summary), rendered from one bench.json.

    python tools/readme_bench.py                     # print what the README should hold
    python tools/readme_bench.py --check             # exit 1 if README.md holds something else
    python tools/readme_bench.py --write             # rewrite README.md between the markers
    python tools/readme_bench.py results/<name>/bench.json --write   # publish another run

README.md holds the rendered text between ``<!-- bench:start PATH -->`` and ``<!-- bench:end -->``;
PATH (from the repository root) is the bench.json it was rendered from, so without a path argument
the tool re-renders from the file the README names. The figures (ms, % of copy, copy bandwidth,
speedups) come from that file, written by ``python -m rmsnorm_lessons bench --json``; the device,
the date, the command's --repeats and the Liger-Kernel version come from the run that produced it in
the MANIFEST.json beside it (lab/manifest.py); the plot is the bench.png beside it, where there is
one. tests/test_readme_bench.py fails when README.md differs from what this renders.
"""
from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
START = re.compile(r"^<!-- bench:start (\S+) -->$", re.M)
END = "<!-- bench:end -->"
WIDTH = 105

BASE, OURS, OURS_SAME_BYTES = "v6_last_block", "v7_fast", "v7_fast (dinp=)"
#: how the sentence under the figure names a column (default: the name in backticks)
LABELS = {"v6_last_block": "`v6_last_block` (the seed's kernel10 design)", "torch eager": "PyTorch",
          "torch.compile": "PyTorch", "Liger-Kernel": "Liger"}
#: how the summary names a peer
PEER_LABELS = {"torch eager": "PyTorch eager",
               "torch.compile": "`torch.compile` in its default mode",
               "torch.compile max-autotune": "`torch.compile` in `max-autotune-no-cudagraphs` mode",
               "Quack": "Quack", "Quack kernel": "Quack's kernel alone",
               "Quack tuned": "Quack's tuned entry point"}
WORDS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight",
         9: "nine"}
DEFAULT_REPEATS = 50  # python -m rmsnorm_lessons bench --repeats


def _word(n: int) -> str:
    return WORDS.get(n, str(n))


def _and(items) -> str:
    items = list(dict.fromkeys(items))
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _wrap(text: str) -> list[str]:
    # never break inside a `code span`
    protected = re.sub(r"`[^`]*`", lambda m: m.group(0).replace(" ", "\0"), text)
    lines = textwrap.wrap(protected, WIDTH, break_long_words=False, break_on_hyphens=False)
    return [line.replace("\0", " ") for line in lines]


def _range(values, fmt) -> str:
    lo, hi = fmt(min(values)), fmt(max(values))
    return lo if lo == hi else f"{lo}-{hi}"


def _run_of(bench_json: Path) -> dict:
    """The MANIFEST.json run that produced ``bench_json``."""
    path = bench_json.parent / "MANIFEST.json"
    if not path.exists():
        raise SystemExit(f"{path} is missing: every results folder carries one (lab/manifest.py)")
    for run in json.loads(path.read_text()).get("runs", []):
        if bench_json.name in run.get("produced", []):
            return run
    raise SystemExit(f"{path} has no run that produced {bench_json.name}")


def _repeats(command: str) -> int:
    args = shlex.split(command)
    for i, a in enumerate(args):
        if a == "--repeats" and i + 1 < len(args):
            return int(args[i + 1])
        if a.startswith("--repeats="):
            return int(a.split("=", 1)[1])
    return DEFAULT_REPEATS


def _relative(path: Path) -> str:
    return path.resolve().relative_to(ROOT).as_posix()


def _cell(r: dict, bold: bool) -> str:
    ms = f"{r['ms']:.4f}"
    ceiling = r.get("percent_of_ceiling")
    shares = f"{r['percent_of_copy']:.0f}" + (f" / {ceiling:.0f}" if ceiling is not None else "")
    return f"{f'**{ms}**' if bold else ms} ({shares} %){' ~' if r.get('noisy') else ''}"


def _peer_versions(names, packages: dict) -> str | None:
    """Which peers ran, with the versions the run recorded."""
    parts = []
    torch = packages.get("torch")
    compiled = [n for n in names if n.startswith("torch.compile")]
    if "torch eager" in names or compiled:
        modes = []
        if "torch eager" in names:
            modes.append("eager")
        if "torch.compile" in names:
            modes.append("`torch.compile` (default mode)")
        if "torch.compile max-autotune" in names:
            modes.append("`torch.compile` (`max-autotune-no-cudagraphs`)")
        parts.append(f"PyTorch{f' {torch}' if torch else ''} {_and(modes)}")
    if "Liger-Kernel" in names:
        liger = packages.get("liger-kernel")
        parts.append(f"Liger-Kernel{f' {liger}' if liger else ''}")
    quack = [n for n in names if n.startswith("Quack")]
    if quack:
        version = packages.get("quack-kernels")
        dsl = packages.get("nvidia-cutlass-dsl")
        forms = {"Quack": "its whole call",
                 "Quack kernel": "its kernel alone, without the dweight sum",
                 "Quack tuned": "its autotuned entry point"}
        parts.append(f"Quack{f' {version}' if version else ''}"
                     f"{f' (CUTLASS DSL {dsl})' if dsl else ''}: "
                     f"{_and(forms[n] for n in quack)}")
    return "; ".join(parts) if parts else None


def render(bench_json) -> str:
    """The text between the README's markers, for this bench.json (a path from the repository root
    or absolute)."""
    from rmsnorm_lessons.speed.bench import LARGE_SHAPES, STREAM_NAME

    bench_json = Path(bench_json)
    if not bench_json.is_absolute():
        bench_json = ROOT / bench_json
    rows = json.loads(bench_json.read_text())
    run = _run_of(bench_json)
    device, date = run["device"], str(run["date"])[:10]
    ceilings = [r for r in rows if r["name"].startswith(STREAM_NAME)]
    rows = [r for r in rows if not r["name"].startswith(STREAM_NAME)]
    names = list(dict.fromkeys(r["name"] for r in rows))
    shapes = list(dict.fromkeys((r["N"], r["C"]) for r in rows))
    cell = {(r["name"], r["N"], r["C"]): r for r in rows}
    copy = [r["copy_gbps"] for r in rows]
    # bf16 tensors of N x C that each one must move: 4 (dinp read too) or 3 (dinp overwritten)
    tensors = {}
    for r in rows:
        t = round(r["bytes"] / (r["N"] * r["C"] * 2))
        if tensors.setdefault(r["name"], t) != t:
            raise ValueError(f"{r['name']} moves {t} and {tensors[r['name']]} tensors at different "
                             f"shapes")
    fewest = min(tensors.values())
    same_bytes = [n for n in names if tensors[n] == fewest]

    out = []
    png = bench_json.with_name("bench.png")
    if png.exists():
        out += [f"![RMSNorm backward bandwidth on one {device}]({_relative(png)})", ""]
    groups = []
    for t in sorted(set(tensors.values()), reverse=True):
        members = [n for n in names if tensors[n] == t]
        verb = "accumulate into `dinp`" if t == 4 else "overwrite it" if t == 3 else "move"
        groups.append(f"{_and(LABELS.get(n, f'`{n}`') for n in members)} {verb} ({t} x N x C x 2 "
                      f"bytes)")
    # runs before 2026-12-03 timed one launch at a time
    burst = max(r.get("burst", 1) for r in rows)
    timed = (f"median of {_repeats(run['command'])} launches" if burst == 1 else
             f"median of {_repeats(run['command'])} bursts of {burst} launches back to back, each "
             f"burst behind an untimed launch of its kind")
    commit = run.get("commit")
    code = (f", the code of commit {commit[:7]}{' with local changes' if run.get('dirty') else ''}"
            if commit else "")
    sentence = (f"Measured on one {device} on {date} (`python -m rmsnorm_lessons bench`{code}, "
                f"one process, CUDA events, "
                f"{timed}, inputs rotated through buffers larger than L2; "
                f"copy bandwidth {_range(copy, lambda x: f'{x:.0f}')} GB/s in the same run). "
                f"Milliseconds, and in brackets the % of the copy bandwidth")
    if ceilings:
        sentence += (" / the % of the same-bytes ceiling (an elementwise kernel that moves exactly "
                     "the bytes of the row's mode with no reduction, timed in the same run at the "
                     "same shape)")
    sentence += f" for the bytes each one must move: {'; '.join(groups)}"
    if len(same_bytes) > 1 and len(groups) > 1:
        sentence += f", so compare those {_word(len(same_bytes))} on time"
    sentence += "."
    versions = _peer_versions(names, run.get("packages", {}))
    if versions:
        sentence += f" Peers: {versions}."
    if any(r.get("noisy") for r in rows):
        sentence += (" `~`: a row whose spread (p90 - p10) stayed above 20 % of its median when "
                     "timed again.")
    out += [*_wrap(sentence), ""]

    out.append("| N x C | " + " | ".join(names) + " |")
    out.append("| --- " * (len(names) + 1) + "|")
    for N, C in shapes:
        present = [n for n in same_bytes if (n, N, C) in cell]
        fastest = min(present, key=lambda n: cell[n, N, C]["ms"]) if len(present) > 1 else None
        cells = [_cell(cell[n, N, C], n == fastest) if (n, N, C) in cell else "-" for n in names]
        out.append(f"| {N}x{C} | " + " | ".join(cells) + " |")

    summary = _summary(names, shapes, cell, same_bytes, run, LARGE_SHAPES)
    if summary:
        out += [""] + _wrap(summary)
    try:
        folder = _relative(bench_json.parent)
    except ValueError:  # a run outside the repository
        folder = bench_json.parent.as_posix()
    out += [""] + _wrap(f"Every file of this run is in `{folder}/`, with the command that "
                        f"made each in its MANIFEST.json; `tools/readme_bench.py` renders this "
                        f"block from its bench.json and a test keeps the two equal.")
    return "\n".join(out)


def _summary(names, shapes, cell, same_bytes, run, large_shapes) -> str | None:
    """v7 against the seed's design, against the peers on the same bytes, and its % of copy and of
    the ceiling at the large shapes."""
    peers = [n for n in same_bytes if n != OURS_SAME_BYTES]
    if not {BASE, OURS, OURS_SAME_BYTES} <= set(names) or not peers:
        return None
    over_base = [cell[BASE, N, C]["ms"] / cell[OURS, N, C]["ms"] for N, C in shapes
                 if (BASE, N, C) in cell and (OURS, N, C) in cell]
    over_peer = [min(cell[p, N, C]["ms"] for p in peers
                     if (p, N, C) in cell) / cell[OURS_SAME_BYTES, N, C]["ms"]
                 for N, C in shapes
                 if (OURS_SAME_BYTES, N, C) in cell and any((p, N, C) in cell for p in peers)]
    if not over_base or not over_peer:
        return None
    packages = run.get("packages", {})
    liger = packages.get("liger-kernel")
    labels = [PEER_LABELS.get(p, p) + (f" {liger}" if p == "Liger-Kernel" and liger else "")
              for p in peers]
    wins = sum(x > 1 for x in over_peer)
    where = "at every shape" if wins == len(over_peer) else (f"at {_word(wins)} of "
                                                             f"{_word(len(over_peer))} shapes")
    text = (f"In this run v7 is {_range(over_base, lambda x: f'{x:.1f}x')} faster than the seed's "
            f"design (where that runs the shape) and, on the same bytes, faster than each peer it "
            f"timed ({_and(labels)}) {where} "
            f"({_range(over_peer, lambda x: f'{x:.2f}x')} over the fastest of them).")
    large = set(map(tuple, large_shapes))
    at_large = [(N, C) for N, C in shapes if (N, C) in large]
    copy = [cell[OURS, N, C]["percent_of_copy"] for N, C in at_large if (OURS, N, C) in cell]
    if copy:
        text += (f" At the {_word(len(copy))} large shapes it reaches "
                 f"{_range(copy, lambda x: f'{x:.0f}')} % of the copy bandwidth")
        ceiling = {mode: [cell[mode, N, C]["percent_of_ceiling"] for N, C in at_large
                          if (mode, N, C) in cell
                          and cell[mode, N, C].get("percent_of_ceiling") is not None]
                   for mode in (OURS, OURS_SAME_BYTES)}
        if ceiling[OURS] and ceiling[OURS_SAME_BYTES]:
            text += (f" and {_range(ceiling[OURS], lambda x: f'{x:.0f}')} % of the same-bytes "
                     f"ceiling accumulating, "
                     f"{_range(ceiling[OURS_SAME_BYTES], lambda x: f'{x:.0f}')} % overwriting")
        text += "."
    return text


def _split(text: str):
    """README text -> (before, source path, inside, after); SystemExit when the markers are not
    there."""
    m = START.search(text)
    end = text.find(END, m.end()) if m else -1
    if not m or end < 0:
        raise SystemExit(f"README.md has no '<!-- bench:start PATH -->' ... '{END}' block")
    return text[:m.end()], m.group(1), text[m.end():end].strip("\n"), text[end:]


def readme_source(readme: Path = README) -> str:
    return _split(readme.read_text())[1]


def readme_block(readme: Path = README) -> str:
    return _split(readme.read_text())[2]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("bench_json", nargs="?",
                        help="default: the file README.md's start marker names")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite README.md between the markers")
    mode.add_argument("--check", action="store_true",
                      help="exit 1 if README.md differs from the rendering")
    args = parser.parse_args(argv)
    text = README.read_text()
    before, source, inside, after = _split(text)
    if args.bench_json:
        source = _relative(Path(args.bench_json))
    rendered = render(source)
    if args.write:
        before = START.sub(f"<!-- bench:start {source} -->", before)
        README.write_text(f"{before}\n{rendered}\n{after}")
        print(f"README.md: benchmark rendered from {source}")
    elif args.check:
        if inside != rendered:
            print(f"README.md's benchmark differs from {source}: run python tools/readme_bench.py "
                  f"--write",
                  file=sys.stderr)
            return 1
        print(f"README.md's benchmark is {source}'s")
    else:
        print(rendered)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
