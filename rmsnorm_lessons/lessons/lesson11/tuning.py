"""The tuning exercise, a search: the learner chooses v7_fast's register-path knobs (K, prefetch,
blocks per SM and the block's threads) to beat the plan's own register plan at one shape, on their
GPU, measured in one run.

:func:`check_tuning` checks the learner's variant against the float64 reference first (a fast wrong
answer scores nothing), then times in one run, interleaved on the same buffers
(:func:`rmsnorm_lessons.speed.bench.time_shape`): the same-bytes ceiling (kernels/stream_ceiling.cu,
an elementwise kernel that moves v7's bytes with no reduction), the plan's default register plan
(``Config(staged=False)``), the learner's variant and every other point of the search space
(:func:`space`). Each is graded as the ceiling's time over its own, in % (a ratio measured in one
run carries over between GPUs and between a busy and a quiet machine far better than a time would).
The target is the default's figure plus :func:`margin` points, so the default never reaches it by
construction; where no point of the space reaches it on this GPU, the learner passes by being within
the spread of the default, and the verdict says so. Only the best figure of the space is reported,
never its Config.

The verdict's score is the learner's figure (:attr:`Verdict.score`): the hub's dashboard ranks the
learners by it, and only a score measured alone on the room's GPU: in a workshop room the check
takes the GPU's turn (:mod:`rmsnorm_lessons.speed.gpu_turn`) for the whole search, so every variant
and the ceiling it is normalised by are timed in the same turn, and the verdict carries that turn's
``lease``. A score above :data:`SCORE_MAX` is a timing fault, never a kernel: the check says so and
scores nothing.

The knobs are lesson 07's occupancy and lesson 10's plan: ``Config(K=..., prefetch=...,
per_sm=...)`` with ``block`` 256 or 512 threads. The rows staged in shared memory
(``Config(staged=True)``) are lesson 12's path and are refused here.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...core import build, gpu, ladder
from ...course.verdict import Verdict, failed, not_verified

#: the shape of the search, accumulate mode: lesson 11's section 1 measures its knobs at other
#: shapes (8192 x 8192 and 16384 x 4096), so its tables do not answer this one
SHAPE = (16384, 2048)
#: the threads a block may have in the search
BLOCKS = (256, 512)
#: the lesson's starting point: one 16-byte chunk a thread, one block of 512 an SM
POOR = ladder.v7_fast.Config(K=1)
REPEATS = 30
#: the target's margin above the default, in points of the ceiling: at least this, else twice the
#: larger spread of the default's and the ceiling's launches
MIN_MARGIN = 1.0
DEFAULT = ladder.v7_fast.Config(staged=False)
#: the most a score can be: v7 moves the ceiling's bytes and does a reduction besides, so it runs
#: at best about as fast as the ceiling (the best variant the H200 measured: 93.4 % of it, rows
#: staged in shared memory at 16384 x 4096); a score half again past the ceiling is a timing fault
SCORE_MAX = 150.0


def space() -> tuple[tuple[ladder.v7_fast.Config, int], ...]:
    """Every point of the search: K = 1..4 (K = 2 with and without prefetch), at one block of 512
    threads an SM, or blocks of 256 with one or two of them an SM."""
    Config = ladder.v7_fast.Config
    knobs = [dict(K=K, prefetch=False) for K in (1, 3, 4)] + [dict(K=2, prefetch=p)
                                                               for p in (False, True)]
    points = [(Config(**k), 512) for k in knobs]
    points += [(Config(**k, per_sm=per_sm), 256) for per_sm in (1, 2) for k in knobs]
    return tuple(points)


def margin(default, ceiling) -> float:
    """Points of the ceiling the target sits above the default: :data:`MIN_MARGIN`, or twice the
    larger spread ((p90 - p10) / median, in %) of the default's and the ceiling's launches."""
    return max(MIN_MARGIN, 2 * 100 * max(default.ms_spread, ceiling.ms_spread))


def _shape(shape) -> tuple[int, int]:
    try:
        N, C = (int(v) for v in shape)
        if (N, C) != tuple(shape):
            raise TypeError
    except (TypeError, ValueError):
        raise ValueError(f"shape must be an (N, C) pair of whole numbers, got {shape!r}") from None
    if N < 1 or C < 8 or C % 8 or C > ladder.v7_fast.ROW_MAX_C:
        raise ValueError(f"shape: (N, C) needs N >= 1 and C a multiple of 8 in "
                         f"8..{ladder.v7_fast.ROW_MAX_C} (rows v7's register path holds), "
                         f"got ({N}, {C})")
    return N, C


def _config(config):
    """The learner's Config (or a dict of its fields), or ``(None, verdict)`` saying why not."""
    Config = ladder.v7_fast.Config
    if config is None or config is Ellipsis:
        return None, failed("replace the placeholder with a Config, e.g. Config(K=2, "
                            "prefetch=True)")
    if isinstance(config, dict):
        try:
            config = Config(**config)
        except TypeError as exc:
            return None, failed(f"a Config takes K, prefetch, per_sm and staged only ({exc})")
        except ValueError as exc:
            return None, failed(str(exc))
    if not isinstance(config, Config):
        return None, failed("give a Config (from rmsnorm_lessons.core.ladder.v7_fast import "
                            f"Config), got {type(config).__name__}")
    if config.staged:
        return None, failed("Config(staged=True) is lesson 12's path (rows staged in shared memory "
                            "by cp.async): this search is over the register path's knobs, K, "
                            "prefetch and per_sm, with the block's threads")
    if not config.tunes_registers:
        return None, failed("name at least one knob of the register path (K, prefetch or "
                            "per_sm); Config() alone leaves every choice to the plan")
    return config, None


def resolved(config, block: int, N: int, C: int, device) -> tuple[int, bool, int, int]:
    """``(K, prefetch, blocks an SM, threads a block)`` the plan runs for ``config`` with blocks of
    ``block`` threads at (N, C) on ``device``: two Configs that run the same are one point."""
    r = ladder.v7_fast.resolve(N, C, device, block=block, config=config)
    return r.layout.K, r.layout.prefetch, r.per_sm, r.layout.block


def describe(config, block: int, N: int = SHAPE[0], C: int = SHAPE[1], device=None) -> str:
    """``"K=2, prefetch, 2 blocks of 256 threads an SM"``: a point of the search in words, as the
    plan resolves it at (N, C) on ``device`` (default: this GPU as the build targets it, else the
    H200's saved facts)."""
    K, prefetch, per_sm, threads = resolved(config, block, N, C,
                                            device or gpu.target_facts_or_fallback()[0])
    parts = [f"K={K}"] + (["prefetch"] if prefetch else [])
    parts.append(f"{per_sm} block{'s' if per_sm > 1 else ''} of {threads} threads an SM")
    return ", ".join(parts)


def _as_rung(block: int):
    """v7_fast, or an unregistered copy of it whose blocks have ``block`` threads (the bench takes
    a rung's own block size)."""
    spec = ladder.get("v7_fast")
    if block == spec.block_size:
        return spec
    return ladder.rung_from_source(name=f"v7_fast_block{block}",
                                   source=build.kernel_source(spec.name), like=spec,
                                   adds=f"v7_fast with blocks of {block} threads",
                                   block_size=block, register_it=False)


def check_tuning(config, block: int = 512, *, shape=SHAPE, overwrite: bool = False,
                 repeats: int = REPEATS) -> Verdict:
    """The search: PASS when v7_fast's register path with ``config`` and blocks of ``block``
    threads reaches the target (the plan's default register plan's % of the same-bytes ceiling plus
    :func:`margin`) at ``shape``, all measured now in one run; NOT YET below it, with the figures;
    NOT VERIFIED where there is no GPU. The verdict's score is yours, in % of the ceiling."""
    if isinstance(block, bool) or block not in BLOCKS:
        raise ValueError(f"block (threads a block) must be one of {BLOCKS}, got {block!r}")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 5:
        raise ValueError(f"repeats must be a whole number >= 5, got {repeats!r}")
    N, C = _shape(shape)
    config, verdict = _config(config)
    if verdict is not None:
        return verdict
    device, where = gpu.target_facts_or_fallback()
    if block == 512 and (config.per_sm or 1) > 1:
        return failed("a block of 512 threads takes every register of an SM's 512-thread budget "
                      "(128 a thread): one block an SM; two blocks need 256 threads each")
    try:
        ladder.plan(_as_rung(block), N, C, device, overwrite=overwrite, config=config)
    except ValueError as exc:
        return failed(f"{config} with blocks of {block} threads cannot run ({N}, {C}) on "
                      f"{where}: {exc}")
    reason = gpu.why_unavailable()
    if reason is not None:
        return not_verified(f"{describe(config, block, N, C, device)} can run {N}x{C}, but the "
                            f"search is measured on a GPU. {reason}")
    return _measure(config, block, N, C, overwrite, repeats)


@dataclass(frozen=True)
class Search:
    """One run's figures, each in % of the same-bytes ceiling."""

    yours: float
    default: float
    best: float
    margin: float
    noisy: bool

    @property
    def target(self) -> float:
        return self.default + self.margin

    @property
    def reachable(self) -> bool:
        """Some point of the space (yours included) reaches the target on this GPU."""
        return max(self.best, self.yours) >= self.target


def _measure(config, block, N, C, overwrite, repeats) -> Verdict:
    """The check, then the search's timings, in one turn of the room's GPU where there is a room
    (:mod:`rmsnorm_lessons.speed.gpu_turn`): a score measured alone carries the turn's lease to the
    dashboard, one measured while the GPU was shared says the dashboard does not rank it."""
    from ...speed import gpu_turn

    with gpu_turn.turn("tuning check") as turn:
        verdict = _timed(config, block, N, C, overwrite, repeats)
    if verdict.score is None or not turn.room:
        return verdict
    if turn.alone:
        verdict.message += f" (alone on the room's GPU, turn {turn.lease})"
        verdict.lease = turn.lease
    else:
        verdict.message += (" (measured while the room's GPU was shared: the dashboard does not "
                            "rank it; run the check again)")
    return verdict


def _timed(config, block, N, C, overwrite, repeats) -> Verdict:
    from ...core import compare
    from ...speed import bench

    yours_rung = _as_rung(block)
    report = compare.check_version(yours_rung, N, C, seed=N + C, overwrite=overwrite,
                                   config=config)
    if not report.ok:
        return failed(f"v7_fast with {describe(config, block, N, C)} is wrong at ({N}, {C}) "
                      f"against float64; not timed:\n{report}")
    rows = [(ladder.get("v7_fast"), overwrite, DEFAULT, "default"),
            (yours_rung, overwrite, config, "yours")]
    device = gpu.target_facts_or_fallback()[0]
    mine = resolved(config, block, N, C, device)
    others = [(c, b) for c, b in space() if resolved(c, b, N, C, device) != mine]
    rows += [(_as_rung(b), overwrite, c, f"space {i}") for i, (c, b) in enumerate(others)]
    timed = {r.name: r for r in bench.time_shape(N, C, rows, ceiling_modes=(overwrite,),
                                                 repeats=repeats)}
    suffix = bench.OVERWRITE_SUFFIX if overwrite else ""
    ceiling = timed[bench.STREAM_NAME + suffix]

    def pct(name):
        return 100 * ceiling.ms / timed[name + suffix].ms

    default = timed["default" + suffix]
    found = Search(pct("yours"), pct("default"),
                   max(pct(f"space {i}") for i in range(len(others))),
                   margin(default, ceiling),
                   any(r.noisy for r in timed.values()))
    if max(found.yours, found.default) > SCORE_MAX:
        return not_verified(f"{found.yours:.1f} % of the same-bytes ceiling at {N}x{C} (the "
                            f"default {found.default:.1f} %): faster than the ceiling by more "
                            f"than {SCORE_MAX - 100:g} %, which a kernel moving the same bytes "
                            "cannot be: a timing fault. Run the check again")
    return grade(found, describe(config, block, N, C), N, C)


def grade(found: Search, yours: str, N: int, C: int) -> Verdict:
    """The verdict on one run's figures (:class:`Search`): the learner's against the target, with
    the default, the margin's reason and the best of the space."""
    said = (f"yours ({yours}) {found.yours:.1f} % of the same-bytes ceiling at {N}x{C}; the "
            f"plan's default register plan {found.default:.1f} %; target {found.target:.1f} % "
            f"(the default + {found.margin:.1f} points: at least {MIN_MARGIN:g}, or twice the "
            f"larger spread of its launches and the ceiling's); the best of the search space "
            f"here: {max(found.best, found.yours):.1f} %, measured in this run"
            + (" (some rows were noisy: run the check again on a quieter GPU)" if found.noisy
               else ""))
    if found.yours >= found.target:
        return Verdict(True, said, score=found.yours)
    if not found.reachable:
        within = found.yours >= found.default - found.margin / 2
        note = ("; the plan's default is the best this space offers on this GPU (no point "
                "reaches the target), so yours passes within the spread of it")
        if within:
            return Verdict(True, said + note, score=found.yours)
        return Verdict(False, said + note.replace("passes within", "must come within")
                       + ": it does not yet", score=found.yours)
    hint = ("Which knob changes the bytes each SM keeps in flight (lesson 09's Little's law), and "
            "which the waits between them (lesson 10's row groups and their barrier)?")
    return Verdict(False, f"{said}: below the target. {hint}", score=found.yours)
