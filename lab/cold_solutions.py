"""The kernel exercises of lessons 02-10 as solved by an engineer from the student edition
(lab/cold/*.cu, written from the skeletons, not copied from the solutions), run through the lessons' own
checks. On a GPU each should say PASS; here, NOT VERIFIED.

    python lab/cold_solutions.py
"""
from __future__ import annotations

import sys
from pathlib import Path

from rmsnorm_lessons.exercises import (lesson02, lesson03, lesson04, lesson05, lesson06, lesson07, lesson08,
                                       lesson09, lesson10)

COLD = Path(__file__).resolve().parent / "cold"
CHECKS = {"lesson02_v1.cu": lesson02.check_v1_kernel, "lesson03_v2.cu": lesson03.check_v2_kernel,
          "lesson04_v3.cu": lesson04.check_v3_kernel, "lesson05_v4.cu": lesson05.check_v4_kernel,
          "lesson06_v5.cu": lesson06.check_v5_kernel, "lesson07_v6.cu": lesson07.check_v6_kernel,
          "lesson08_scale_wide.cu": lesson08.check_scale_kernel,
          "lesson09_row_pass.cu": lesson09.check_v7_kernel, "lesson10_v3_fix.cu": lesson10.check_v3_fix}


def main() -> int:
    for name, check in CHECKS.items():
        verdict = check((COLD / name).read_text())
        print(f"{name}: {verdict}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
