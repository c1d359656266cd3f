"""The three bugs of lesson 13 (``rmsnorm_lessons.lessons.lesson13.bugs``) on the H200: float64 check and sanitizer report.

    python lab/bugs.py [--compile-only] [--json F]

``--compile-only`` builds the three kernels for sm_90 (no GPU needed).
"""
from __future__ import annotations

import argparse
import sys

import manifest

from rmsnorm_lessons.core import build, compare, gpu
from rmsnorm_lessons.lessons.lesson13 import bugs


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--compile-only", action="store_true", help="build the three kernels, run nothing")
    parser.add_argument("--json", help="write the findings here (and record the run in its folder's MANIFEST.json)")
    args = parser.parse_args(argv)
    rows = []
    for name, bug in bugs.BUGS.items():
        rung = bugs.rung(name)
        res = build.compile_file(rung, "sm_90").resources[rung.kernels[0]]
        N, C = bug.shape
        print(f"{name}: built ({res.registers} registers, {res.barriers} barrier(s)); {bug.tool} should find it "
              f"at {N}x{C}")
        row = {"bug": name, "from": bug.shipped, "tool": bug.tool, "N": N, "C": C}
        if not args.compile_only:
            gpu.require()
            report = compare.check_version(rung, N, C, seed=N + C)
            row["check"], row["ok"] = str(report), report.ok
            print("  " + str(report).replace("\n", "\n  "))
            found = bugs.sanitize(name)
            row["sanitizer"], row["errors"] = found.output, found.errors
            print("  " + str(found).replace("\n", "\n  "))
        rows.append(row)
    if args.json:
        manifest.save(args.json, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
