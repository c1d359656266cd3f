"""Three bugs for the lesson on finding bugs, each one edit away from a shipped rung, and what finds them.

    python lab/bugs.py [--compile-only] [--json F]

* ``bug_race_v3``: v3_smem without the ``__syncthreads()`` between the block's shared-memory atomics and
  its flush to global memory: warps flush columns other warps are still adding to. racecheck.
* ``bug_tail_v2``: v2_warp's second column loop runs to ``c <= C``: one element past each row, which is
  the next row's first (wrong results) and, on the last row, past the end of the buffer. memcheck.
* ``bug_seed_loop_v6``: v6_last_block with the seed's row loop (``for row = warp's first; row < N; row +=
  warps in the grid``) in place of its block-uniform one: where N is not a multiple of the grid's warps
  (N = 8200 on a 132-SM H200: 264 blocks x 16 warps = 4224), some warps of a block leave the loop while
  the others wait at its ``__syncthreads``. synccheck.

Each is built from the shipped source by one text edit (the script stops if the edit does not apply
exactly once), compiled, then on a GPU checked against float64 (what kind of wrong it is) and run under
the compute-sanitizer tool that should find it (``rmsnorm_lessons.exercises.kernel_check.sanitize``).
``--compile-only`` stops after compiling (no GPU needed).
"""
from __future__ import annotations

import argparse
import sys

import manifest

from rmsnorm_lessons import build, check, gpu, ladder
from rmsnorm_lessons.exercises import kernel_check

#: name: (shipped rung, the text to replace, its replacement, the tool that should find it, (N, C))
BUGS = {
    "bug_race_v3": ("v3_smem",
                    "    __syncthreads();\n    for (int c = threadIdx.x; c < C; c += blockDim.x) atomicAdd(&dweight[c]",
                    "    for (int c = threadIdx.x; c < C; c += blockDim.x) atomicAdd(&dweight[c]",
                    "racecheck", (129, 776)),
    "bug_tail_v2": ("v2_warp",
                    "    for (int c = lane; c < C; c += WARP_SIZE) {\n",
                    "    for (int c = lane; c <= C; c += WARP_SIZE) {\n",
                    "memcheck", (129, 776)),
    "bug_seed_loop_v6": ("v6_last_block",
                         "    for (long long first = (long long)blockIdx.x * warps; first < N; "
                         "first += (long long)gridDim.x * warps) {\n"
                         "        const long long row = first + warp;\n"
                         "        const bool active = row < N;  // warp-uniform\n",
                         "    for (long long row = (long long)blockIdx.x * warps + warp; row < N; "
                         "row += (long long)gridDim.x * warps) {\n"
                         "        const bool active = true;\n",
                         "synccheck", (8200, 768)),
}


def broken_source(shipped: str, old: str, new: str, last: bool = False) -> str:
    """The shipped kernel's text with ``old`` replaced by ``new`` (its last occurrence where ``last``)."""
    text = build.kernel_source(shipped)
    count = text.count(old)
    if count == 0 or (count > 1 and not last):
        raise SystemExit(f"{shipped}: the edit applies {count} times, not once: kernels/{shipped}.cu changed?")
    at = text.rfind(old)
    return text[:at] + new + text[at + len(old):]


def register(name: str) -> ladder.Rung:
    shipped, old, new, _, _ = BUGS[name]
    spec = ladder.get(shipped)
    # v2's loop header appears twice (the dot product, then the update): the bug is in the update
    source = broken_source(shipped, old, new, last=(name == "bug_tail_v2"))
    return ladder.rung_from_source(name=name, source=source, plan=spec.plan, kernels=spec.kernels, dtype=spec.dtype,
                                   adds=f"{shipped} with a bug", c_multiple=spec.c_multiple,
                                   block_size=spec.block_size, max_block=spec.max_block,
                                   shared_memory=spec.shared_memory, defines=spec.defines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--compile-only", action="store_true", help="build the three kernels, run nothing")
    parser.add_argument("--json", help="write the findings here (and record the run in its folder's MANIFEST.json)")
    args = parser.parse_args(argv)
    rows = []
    for name, (shipped, _, _, tool, (N, C)) in BUGS.items():
        rung = register(name)
        res = build.compile_file(rung, "sm_90").resources
        main_kernel = res[rung.kernels[0]]
        print(f"{name}: built ({main_kernel.registers} registers, {main_kernel.barriers} barrier(s)); "
              f"{tool} should find it at {N}x{C}")
        row = {"bug": name, "from": shipped, "tool": tool, "N": N, "C": C}
        if not args.compile_only:
            gpu.require()
            report = check.check_version(rung, N, C, seed=N + C)
            row["check"] = str(report)
            row["ok"] = report.ok
            print(f"  against float64: {'right (the bug did not show in the numbers)' if report.ok else 'WRONG'}")
            if not report.ok:
                print("  " + str(report).replace("\n", "\n  "))
            row["sanitizer"] = kernel_check.sanitize(rung, tools=(tool,), shape=(N, C))
            print(f"  {row['sanitizer']}")
        rows.append(row)
    if args.json:
        manifest.save(args.json, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
