#!/usr/bin/env python3
"""Write ``results/<run>/openings.json``: what every lesson's opening measured on a GPU, for the
machines without one (:mod:`rmsnorm_lessons.course.saved`).

    python tools/save_openings.py measure [--run NAME] [--lessons 02,03]   # GPU, ncu
    python tools/save_openings.py seed NOTEBOOKS [--run h100-2026-12-05]   # no GPU
    python tools/save_openings.py list [--run NAME]                        # what a file holds

``measure`` calls each lesson's ``opening()`` (and ``opening(after=True)`` where it takes it) and
lesson 13's ``ladder_profile`` for every rung, with ``RMSNORM_SAVE_RUN`` set, so each call records
what it measured (the device, the date). Without ``--run`` it writes into
``rmsnorm_lessons.course.saved.RUN``'s file; with a new run's name, set ``saved.RUN`` to it after.

``seed`` reads the text outputs of a run's executed notebooks (the H100 run of 2026-12-05, kept by
the team outside the repository as an archive of its notebooks): the Nsight Compute tables of the
``bottleneck`` cells and the bench tables, at the cells :data:`SEED` names. A figure that run did
not print is None, marked "not in the saved run". Each entry says which cells it came from.
"""
from __future__ import annotations

import argparse
import importlib
import inspect
import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rmsnorm_lessons.course import saved  # noqa: E402
from rmsnorm_lessons.inspection.nsight_profile import EXTRA, UNLISTED, Profile  # noqa: E402

#: the run the seed comes from, as the lead labelled it
SEED_DEVICE, SEED_DATE = "NVIDIA H100 80GB HBM3", "2026-12-05"
#: what a field the run's profiles did not print says (they printed duration, DRAM %, achieved
#: occupancy and the top three stall reasons)
NOT_SAVED = "not in the saved run"
PROFILE_ROW = re.compile(r"^(?P<version>\S+)\s+(?P<kernel>\S+)\s+(?P<N>\d+)x(?P<C>\d+)\s+"
                         r"(?P<us>[\d.]+)\s+(?P<dram>[\d.]+)\s+(?P<occ>[\d.]+)\s+(?P<stalls>.*)$")
STALL = re.compile(r"(\w+) (\d+) %")
BENCH_ROW = re.compile(r"^(?P<name>\S.*?)\s+(?P<N>\d+)x(?P<C>\d+)\s+(?P<ms>[\d.]+)\s+"
                       r"(?P<gbps>\d+)\s+(?P<pct>[\d.]+)%")
COPY = re.compile(r"copy(?: bandwidth)? (\d+) GB/s|\((\d+) GB/s\)")


@dataclass
class Seed:
    """One entry: the call, and the cells of the run its figures are read from."""

    version: str
    N: int
    C: int
    profile: tuple | None = None  # (notebook stem, cell): a bottleneck cell's table
    timing: tuple | None = None  # (notebook stem, cell, row name)
    config: object = None
    probe: tuple | None = None  # (lesson, kernel, args): a lesson 09 kernel, not a rung
    figures: dict = field(default_factory=dict)  # name -> (stem, cell, how to read it)


def _seeds() -> list[Seed]:
    from rmsnorm_lessons.core.ladder.v7_fast import Config

    big, seed_shape = (16384, 2048), (8192, 1024)
    return [
        Seed("v1_naive", *seed_shape, ("02_naive", 23), ("03_warp_per_row", 30, "v1_naive")),
        Seed("v2_warp", *seed_shape, ("03_warp_per_row", 34), ("03_warp_per_row", 30, "v2_warp"),
             figures={"ablation:atomicAdd": ("03_warp_per_row", 30, "ablation")}),
        Seed("v3_smem", *seed_shape, ("04_shared_memory", 36),
             ("04_shared_memory", 34, "v3_smem")),
        Seed("v4_interleaved", *big, timing=("06_vectorized", 25, "v4 interleaved")),
        Seed("v4_vec_bf16", *big, ("06_vectorized", 38), ("07_two_pass", 37, "v4_vec_bf16"),
             figures={"differing_channels": ("07_two_pass", 8, "fp32 sums"),
                      "differing_channels_bf16": ("07_two_pass", 8, "v4_vec_bf16 dweight")}),
        Seed("v5_two_pass", *big, ("07_two_pass", 39), ("07_two_pass", 37, "v5_two_pass")),
        Seed("v6_last_block", *big, ("08_last_block", 42), ("08_last_block", 37,
                                                            "v6_last_block")),
        Seed("v6_last_block", 16384, 4096, timing=("10_v7_one_pass", 19, "v6_last_block")),
        Seed("v7_fast", 16384, 4096, timing=("10_v7_one_pass", 19, "v7 register path"),
             config=Config(staged=False)),
        Seed("v7_fast", 16384, 4096, ("10_v7_one_pass", 21), ("11_v7_tuning", 21, "v7_fast")),
        # lesson 13's ladder at 16384x2048: the rungs the openings above do not time there
        Seed("v1_naive", *big, timing=("08_last_block", 37, "v1_naive")),
        Seed("v2_warp", *big, timing=("08_last_block", 37, "v2_warp")),
        Seed("v3_smem", *big, timing=("08_last_block", 37, "v3_smem")),
        Seed("v7_fast", *big, timing=("11_v7_tuning", 19, "v7_fast")),
        Seed("v7_fast", *seed_shape, ("13_finding_bugs", 23)),
        Seed("v7_fast", 32768, 1024, ("13_finding_bugs", 27)),
        # lesson 09: y = a * x on 64 Mi floats, as lesson 00 launched it and the widest variant
        Seed("scale_f32_x1", 64 * 2**20, 1, timing=("09_bytes_in_flight", 19, "scale_f32_x1 grid"),
             probe=("lesson09", "scale_f32_x1", ())),
        Seed("scale_f128_x4", 64 * 2**20, 1, timing=("09_bytes_in_flight", 19, "scale_f128_x4 2"),
             probe=("lesson09", "scale_f128_x4", (2,))),
    ]


def _text(cell) -> str:
    out = []
    for o in cell.get("outputs", []):
        t = o.get("text") or o.get("data", {}).get("text/plain", "")
        out.append("".join(t) if isinstance(t, list) else t)
    return "\n".join(out)


class Notebooks:
    """The run's notebooks, read once each; every cell named must have printed something."""

    def __init__(self, folder: Path):
        self.folder, self.read = Path(folder), {}

    def output(self, stem: str, index: int) -> str:
        if stem not in self.read:
            self.read[stem] = json.loads((self.folder / f"{stem}.ipynb").read_text())
        text = _text(self.read[stem]["cells"][index])
        if not text.strip():
            raise ValueError(f"{stem} cell {index} has no output in {self.folder}")
        return text


def parse_profile(text: str, version: str, N: int, C: int) -> Profile:
    """The row of ``version`` at N x C in a bottleneck cell's table, as a Profile whose stalls are
    the printed shares (the rest under "unlisted") and whose extra fields are None."""
    for line in text.splitlines():
        m = PROFILE_ROW.match(line)
        if m and (m["version"], int(m["N"]), int(m["C"])) == (version, N, C):
            stalls = {r: float(s) for r, s in STALL.findall(m["stalls"])}
            stalls[UNLISTED] = max(0.0, 100.0 - sum(stalls.values()))
            return Profile(version, m["kernel"], (N, C), float(m["dram"]), float(m["occ"]),
                           float(m["us"]), stalls, missing={f: NOT_SAVED for f in EXTRA})
    raise ValueError(f"no profile row of {version} at {N}x{C} in:\n{text}")


def _copy(text: str, rows: list) -> float:
    """The copy bandwidth a table was measured against: printed in the cell, or (where not) a
    row's printed GB/s over its printed % of copy, from the fastest row (the least rounded)."""
    m = COPY.search(text)
    if m:
        return float(m.group(1) or m.group(2))
    gbps, pct = max(rows)
    return gbps / (pct / 100)


def parse_timing(text: str, name: str, N: int, C: int, nbytes: int) -> dict:
    """Row ``name`` at N x C of a bench table (or lesson 09's scale table, or lesson 02's one
    line) as a Timing's fields: GB/s recomputed from the bytes and the printed ms."""
    rows, found = [], None
    scale = re.compile(r"^(?P<name>scale_\w+)\s+(?P<b>\d+|grid)\s+[\d.]+\s+(?P<ms>[\d.]+)\s+"
                       r"(?P<gbps>\d+)\s+(?P<pct>[\d.]+)%")
    for line in text.splitlines():
        m = BENCH_ROW.match(line)
        if m:
            row = (m["name"].strip(), (int(m["N"]), int(m["C"])))
        elif (m := scale.match(line)):
            row = (f"{m['name']} {m['b']}", (N, C))
        else:
            continue
        rows.append((float(m["gbps"]), float(m["pct"])))
        if row == (name, (N, C)):
            found = float(m["ms"])
    if found is None:
        raise ValueError(f"no timing row {name!r} at {N}x{C} in:\n{text}")
    ms, gbps = found, nbytes / (found * 1e-3) / 1e9
    return dict(name=name, N=N, C=C, ms=ms, ms_spread=None, bytes=nbytes, gbps=gbps,
                copy_gbps=_copy(text, rows), burst=1)


def parse_figure(text: str, how: str) -> float:
    if how == "ablation":  # "v2 without its atomics: 0.0764 ms against 0.2688 ms: ..."
        m = re.search(r"without .*?: ([\d.]+) ms against ([\d.]+) ms", text)
        return 100.0 * (1 - float(m.group(1)) / float(m.group(2)))
    prefix = "  its fp32 sums before bf16" if how == "fp32 sums" else how
    for line in text.splitlines():
        if line.startswith(prefix):
            return float(re.search(r"(\d+) of \d+", line).group(1))
    raise ValueError(f"no {how!r} line in:\n{text}")


def _bytes(seed: Seed) -> int:
    if seed.probe is not None:
        return 2 * 4 * seed.N * seed.C  # y = a * x: 4 bytes read, 4 written per float
    from rmsnorm_lessons.core import ladder

    if seed.version == "v4_interleaved":
        ladder.v4_interleaved()
    return ladder.get(seed.version).bytes_moved(seed.N, seed.C)


def seed_entry(seed: Seed, books: Notebooks) -> tuple[str, dict]:
    """The entry of one :class:`Seed`: its key, and data with where each part came from."""
    from rmsnorm_lessons.inspection.nsight import Probe

    where, data = [], {"timing": None, "profile": None, "extra": {}, "figures": {}}
    if seed.profile:
        stem, cell = seed.profile
        data["profile"] = parse_profile(books.output(stem, cell), seed.version, seed.N,
                                        seed.C).as_dict()
        where.append(f"profile: {stem} cell {cell}")
    if seed.timing:
        stem, cell, name = seed.timing
        data["timing"] = parse_timing(books.output(stem, cell), name, seed.N, seed.C,
                                      _bytes(seed))
        where.append(f"time: {stem} cell {cell} ({name})")
    for fig, (stem, cell, how) in seed.figures.items():
        data["figures"][fig] = parse_figure(books.output(stem, cell), how)
        where.append(f"{fig}: {stem} cell {cell}")
    data["source"] = f"the {SEED_DATE} run's notebooks: " + "; ".join(where)
    target = Probe(seed.probe[0], seed.probe[1], *seed.probe[2]) if seed.probe else seed.version
    return saved.key(target, seed.N, seed.C, seed.config), data


def seed(folder: Path, run: str) -> Path:
    books, written = Notebooks(folder), None
    for s in _seeds():
        name, data = seed_entry(s, books)
        source = data.pop("source")
        written = saved.record("opening", name, data, device=SEED_DEVICE, date=SEED_DATE,
                               source=source, run=run)
        print(f"{name}: " + ", ".join(k for k in ("timing", "profile") if data[k])
              + "".join(f", {f}" for f in data["figures"]))
    return written


def measure(run: str, lessons: list[str] | None) -> None:
    """Every lesson's opening on this GPU, recorded (``RMSNORM_SAVE_RUN``) as it is measured."""
    os.environ[saved.ENV] = run
    from rmsnorm_lessons.core import ladder

    numbers = lessons or [f"{n:02d}" for n in range(2, 14)]
    for number in numbers:
        home = importlib.import_module(f"rmsnorm_lessons.lessons.lesson{number}")
        calls = []
        if hasattr(home, "opening"):
            calls.append(("opening()", lambda: home.opening()))
            if "after" in inspect.signature(home.opening).parameters:
                calls.append(("opening(after=True)", lambda: home.opening(after=True)))
        if hasattr(home, "ladder_profile"):
            calls += [(f"ladder_profile({v!r})", lambda v=v: home.ladder_profile(v))
                      for v in ladder.VERSIONS if any(v == r.name for r in ladder.SHIPPED)]
        for what, call in calls:
            result = call()
            source = getattr(result, "source", "")
            print(f"lesson {number} {what}: {source}", flush=True)
            if "measured now" not in source:
                raise SystemExit(f"lesson {number} {what} was not measured here: {source}")


def listing(run: str) -> None:
    for kind, entries in saved.read(run).items():
        if not isinstance(entries, dict):
            continue
        for name, entry in entries.items():
            prof = entry.get("profile") or {}
            held = [k for k in ("timing", "profile") if entry.get(k)] + list(entry["figures"])
            extra = [f for f in EXTRA if prof.get(f) is not None]
            print(f"{kind} {name} ({saved.label(entry)}): {', '.join(held) or 'nothing'}"
                  + (f"; extra: {', '.join(extra)}" if extra else ""))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    m = sub.add_parser("measure", help="GPU: every lesson's opening, recorded")
    m.add_argument("--run", default=saved.RUN)
    m.add_argument("--lessons", type=lambda s: [x.strip() for x in s.split(",") if x.strip()])
    s = sub.add_parser("seed", help="from an executed run's notebooks")
    s.add_argument("notebooks", type=Path)
    s.add_argument("--run", default=saved.RUN)
    ls = sub.add_parser("list", help="what a run's file holds")
    ls.add_argument("--run", default=saved.RUN)
    args = ap.parse_args(argv)
    if args.command == "seed":
        print(f"wrote {seed(args.notebooks, args.run)}")
    elif args.command == "measure":
        measure(args.run, args.lessons)
    else:
        listing(args.run)
    return 0


if __name__ == "__main__":
    sys.exit(main())
