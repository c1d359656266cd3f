"""What the lab's v7_fast scripts share: a launch variant, its launcher, its check against float64, its timing.

A variant is a :class:`rmsnorm_lessons.core.ladder.v7_fast.Config` (K, prefetch, blocks per SM, how the
partials are summed), a block size and a mode (accumulate, or overwrite: ``dinp =``). Everything goes
through the package's public API: ``launch.launcher(..., config=)``, ``rl.run(..., config=)``,
``compare.compare_outputs`` and ``bench``. The scripts beside this file import it as a sibling module
(``python lab/<script>.py`` puts lab/ on sys.path); the package never imports it.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields

import numpy as np

import rmsnorm_lessons as rl
from rmsnorm_lessons.core import bf16, compare, gpu, ladder, launch, reference
from rmsnorm_lessons.core.ladder import v7_fast
from rmsnorm_lessons.core.ladder.v7_fast import Config
from rmsnorm_lessons.speed import bench

V7 = "v7_fast"
#: the checks' problem size: odd, and more rows than one round of the grid's row groups
CHECK_N = 1031


@dataclass(frozen=True)
class Variant:
    """One way of launching v7_fast: a Config, a block size (None: the rung's) and the mode."""

    config: Config = field(default_factory=Config)
    block: int | None = None
    overwrite: bool = False

    @property
    def tag(self) -> str:
        """``default``, or what differs from it: ``K=2,prefetch=False,b=256 (dinp=)``."""
        base = Config()
        parts = [f"{f.name}={getattr(self.config, f.name)}" for f in fields(Config)
                 if getattr(self.config, f.name) != getattr(base, f.name)]
        if self.block:
            parts.append(f"b={self.block}")
        return (",".join(parts) or "default") + (" (dinp=)" if self.overwrite else "")

    @property
    def block_size(self) -> int:
        return self.block or ladder.get(V7).block_size


#: the named variants of v7_explore.py and v7_fixed_cost.py (their JSON rows keep these names)
NAMED = {
    "default": Config(),  # the plan's choice
    "base": Config(prefetch=False),  # no prefetch: K from C (4 above C = 1024)
    "pf": Config(prefetch=True),  # prefetch the next row, K = 2
}


def resolved(N: int, C: int, v: Variant) -> v7_fast.Resolved:
    """The launch the plan makes of this variant at (N, C) on this GPU (ValueError where it cannot)."""
    return v7_fast.resolve(N, C, gpu.facts(), block=v.block_size, overwrite=v.overwrite, config=v.config)


def describe(N: int, C: int, v: Variant) -> str:
    r = resolved(N, C, v)
    s = r.layout
    return (f"K={s.K}{' prefetch' if s.prefetch else ''} G={s.group} groups={s.groups} block={s.block} "
            f"per_sm={r.per_sm} grid={r.grid} reducers={r.reducers} smem={s.smem}")


def launcher(C: int, v: Variant, N: int | None = None):
    """The package's cached launcher for this variant; with ``N``, its plan is made now, so a variant the
    plan refuses raises ValueError here rather than inside a timed loop."""
    L = launch.launcher(V7, C, block_size=v.block, overwrite=v.overwrite, config=v.config)
    if N is not None:
        L.plan(N)
    return L


def run_host(p: dict, v: Variant):
    """Run the variant on host problem ``p`` (reference.random_problem): (dinp, dweight) as NumPy."""
    return rl.run(V7, p["dout"], p["inp"], p["weight"], p["rstd"], p["dinp"], p["dweight"],
                       block_size=v.block, overwrite=v.overwrite, config=v.config)


def against_reference(got, p: dict, overwrite: bool, name: str = V7) -> compare.CheckReport:
    """``got`` = (dinp, dweight) against the float64 gradient of ``p`` (added to p's dinp unless overwrite)."""
    ref = reference.backward(p["dout"], p["inp"], p["weight"], p["rstd"], None if overwrite else p["dinp"],
                             p["dweight"])
    return compare.compare_outputs(ladder.get(V7), len(p["rstd"]), got, ref, name=name)


def line(tag: str, report: compare.CheckReport, extra: str = "") -> str:
    a, b = report.dinp, report.dweight
    return (f"{'ok  ' if report.ok else 'FAIL'} {tag:<22} N={report.N:<6} C={report.C:<6} "
            f"dinp {a.rel_l2_error:.1e}/{a.max_abs_error:.1e} dweight {b.rel_l2_error:.1e}/{b.max_abs_error:.1e} "
            f"{extra}")


def time_variant(v: Variant, N: int, C: int, problem: bench.DeviceProblem, copy_gbps: float, repeats: int,
                 name: str | None = None) -> bench.Timing:
    """Time the variant at (N, C) on ``problem``'s buffer sets (bench.bench_version: CUDA events, each
    launch behind a busy kernel, sets larger than L2), counted with v7's bytes for the mode."""
    launcher(C, v, N)  # a plan the variant cannot make fails here, before the timing starts
    return bench.bench_version(V7, N, C, copy_gbps, repeats=repeats, problem=problem, overwrite=v.overwrite,
                               config=v.config, block_size=v.block, name=name or v.tag)


def checked_timing(v: Variant, N: int, C: int, small: dict, problem: bench.DeviceProblem, copy_gbps: float,
                   repeats: int, name: str | None = None) -> bench.Timing | None:
    """Check the variant on the small host problem (same C) against float64; if right, time it at (N, C) on
    ``problem`` (a bench.Timing), else print why and return None: a variant is never timed unchecked."""
    report = against_reference(run_host(small, v), small, v.overwrite, name or v.tag)
    if not report.ok:
        print(f"FAIL {name or v.tag} at C={C}: not timed\n{report}")
        return None
    return time_variant(v, N, C, problem, copy_gbps, repeats, name)


def launchable_timing(v: Variant, N: int, C: int, small: dict, problem: bench.DeviceProblem, copy_gbps: float,
                      repeats: int, name: str | None = None) -> bench.Timing | None:
    """:func:`checked_timing` for a variant the launcher accepts at (N, C); one it refuses (a plan that does
    not fit) is reported in a line and gives None, like one that fails its check."""
    try:
        resolved(N, C, v)
        launcher(C, v, N)
    except ValueError as exc:
        print(f"skip {name or v.tag} at {N}x{C}: {str(exc)[:120]}")
        return None
    return checked_timing(v, N, C, small, problem, copy_gbps, repeats, name)


def add_variant_argument(parser, default: str) -> None:
    """``--variants a;b``: names of :data:`NAMED`."""
    parser.add_argument("--variants", default=default, help=f"names separated by ; (of {', '.join(NAMED)})")


def variant_names(parser, args) -> list[str]:
    """The names ``--variants`` gave, every one of them known, or the parser's usage error."""
    names = args.variants.split(";")
    unknown = [n for n in names if n not in NAMED]
    if unknown:
        parser.error(f"unknown variant(s) {', '.join(unknown)}; the variants are {', '.join(NAMED)}")
    return names


def small_problem(C: int) -> dict:
    """The host problem variants are checked on before they are timed at C."""
    return reference.random_problem(CHECK_N, C, bf16.bfloat16, seed=C + 7, accumulate=True)


def same_bits(a, b) -> bool:
    """(dinp, dweight) pairs bitwise equal."""
    return all(np.array_equal(bf16.bits(x), bf16.bits(y)) for x, y in zip(a, b))
