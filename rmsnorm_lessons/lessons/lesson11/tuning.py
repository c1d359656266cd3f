"""The tuning exercise: choose v7_fast's variant (a
:class:`~rmsnorm_lessons.core.ladder.v7_fast.Config`) that comes closest to the same-bytes ceiling.

The check times v7_fast with the learner's Config and the same-bytes ceiling
(kernels/stream_ceiling.cu: an elementwise kernel that moves v7's bytes with no reduction,
:func:`rmsnorm_lessons.speed.bench.stream_ceiling`) in the same run, interleaved on the same buffers
(:func:`rmsnorm_lessons.speed.bench.time_shape`), and grades the time ratio alone: the score is the
ceiling's time over v7's, in %, at each shape (their geometric mean over several shapes). A ratio
measured in one run carries over between GPUs and between a busy and a quiet machine far better than
a time would. Before anything is timed, the variant is checked against the float64 reference at each
shape: a fast wrong answer scores nothing.

The hub's dashboard ranks the learners by this score (:attr:`Verdict.score`), and only a score
measured alone on the room's GPU: in a workshop room the check takes the GPU's turn
(:mod:`rmsnorm_lessons.speed.gpu_turn`) for the whole measurement, so v7 and the ceiling it is
normalised by are timed in the same turn, and the verdict carries that turn's ``lease``. A score
above :data:`SCORE_MAX` is a timing fault, never a kernel: the check says so and scores nothing.
"""
from __future__ import annotations

import math

from ...core import gpu, ladder
from ...course.verdict import Verdict, failed, not_verified

#: the default shapes: above L2, where v7 is bandwidth-bound (bench.LARGE_SHAPES's middle one)
SHAPES = ((16384, 4096),)
#: lesson 11's target, set between what the H200 measured at 16384x4096 accumulating: the plan's
#: own choice (rows staged in shared memory) 93.4 % of the ceiling (lesson 12's staged-rows cell,
#: 2026-12-04) and 90.1 % in the steady-state sweep (results/h200-2026-12-03e/ceiling/burst.log);
#: the register path 85.3 % (the same cell); one chunk a thread (K = 1, two or three blocks an SM)
#: 81-85 % (results/h200-2026-12-02/explore.json), and Config(K=1) keeps fewer bytes in flight
TARGET = 88.0
#: the lesson's starting point: one 16-byte chunk a thread, one block of 512 an SM
POOR = ladder.v7_fast.Config(K=1)
REPEATS = 30
#: the most a score can be: v7 moves the ceiling's bytes and does a reduction besides, so it runs
#: at best about as fast as the ceiling (the best variant the H200 measured: 93.4 %, TARGET's
#: note); a score half again past the ceiling is a timing fault, not a kernel
SCORE_MAX = 150.0


def _shapes(shapes) -> list[tuple[int, int]]:
    try:
        out = [(int(N), int(C)) for N, C in shapes]
        if any((N, C) != tuple(s) for (N, C), s in zip(out, shapes)):
            raise TypeError
    except (TypeError, ValueError):
        raise ValueError(f"shapes must be (N, C) pairs of whole numbers, got {shapes!r}") from None
    if not out:
        raise ValueError("shapes must name at least one (N, C)")
    for N, C in out:
        if N < 1 or C < 8 or C % 8 or C > ladder.v7_fast.MAX_C:
            raise ValueError(f"shapes: each (N, C) needs N >= 1 and C a multiple of 8 in "
                             f"8..{ladder.v7_fast.MAX_C} (v7_fast's 16-byte chunks), "
                             f"got ({N}, {C})")
    return out


def _config(config):
    """The learner's Config (or a dict of its fields), or ``(None, verdict)`` saying why not."""
    Config = ladder.v7_fast.Config
    if config is None or config is Ellipsis:
        return None, failed("replace the placeholder with a Config, e.g. "
                            "Config(K=2, prefetch=True)")
    if isinstance(config, dict):
        try:
            config = Config(**config)
        except TypeError as exc:
            return None, failed(f"a Config takes K, prefetch, per_sm and staged only ({exc})")
        except ValueError as exc:
            return None, failed(str(exc))
    if not isinstance(config, Config):
        return None, failed("give a Config (from rmsnorm_lessons.core.ladder.v7_fast import "
                            "Config), "
                            f"got {type(config).__name__}")
    return config, None


def check_tuning(config, target: float = TARGET, shapes=SHAPES, overwrite: bool = False,
                 repeats: int = REPEATS) -> Verdict:
    """PASS when v7_fast with ``config`` reaches ``target`` % of the same-bytes ceiling (the
    geometric mean over ``shapes``), measured now against the ceiling in the same run; NOT YET below
    it, with the figure; NOT VERIFIED where there is no GPU. The verdict's score is the % of the
    ceiling."""
    if isinstance(target, bool) or not isinstance(target, (int, float)) or not 0 < target <= 200:
        raise ValueError(f"target (% of the same-bytes ceiling) must be a number in (0, 200], "
                         f"got {target!r}")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 5:
        raise ValueError(f"repeats must be a whole number >= 5, got {repeats!r}")
    shapes = _shapes(shapes)
    config, verdict = _config(config)
    if verdict is not None:
        return verdict
    device, where = gpu.target_facts_or_fallback()
    for N, C in shapes:
        try:
            ladder.plan("v7_fast", N, C, device, overwrite=overwrite, config=config)
        except ValueError as exc:
            return failed(f"this Config cannot run ({N}, {C}) on {where}: {exc}")
    reason = gpu.why_unavailable()
    if reason is not None:
        return not_verified(f"the Config is valid at {len(shapes)} shape(s), but its speed is "
                            f"measured on a GPU. {reason}")
    return _measure(config, target, shapes, overwrite, repeats)


def _measure(config, target, shapes, overwrite, repeats) -> Verdict:
    from ...core import compare
    from ...speed import gpu_turn

    with gpu_turn.turn("tuning check") as turn:
        verdict = _timed(config, target, shapes, overwrite, repeats, compare)
    if verdict.score is None or not turn.room:
        return verdict
    if turn.alone:
        verdict.message += f" (alone on the room's GPU, turn {turn.lease})"
        verdict.lease = turn.lease
    else:
        verdict.message += (" (measured while the room's GPU was shared: the dashboard does not "
                            "rank it; run the check again)")
    return verdict


def _timed(config, target, shapes, overwrite, repeats, compare) -> Verdict:
    from ...speed import bench

    spec = ladder.get("v7_fast")
    for N, C in shapes:
        report = compare.check_version(spec, N, C, seed=N + C, overwrite=overwrite, config=config)
        if not report.ok:
            return failed(f"v7_fast with {config} is wrong at ({N}, {C}) against float64; "
                          f"not timed:\n{report}")
    parts, ratios = [], []
    for N, C in shapes:
        rows = bench.time_shape(N, C, [(spec, overwrite, config, "yours")],
                                ceiling_modes=(overwrite,), repeats=repeats)
        suffix = bench.OVERWRITE_SUFFIX if overwrite else ""
        yours = next(r for r in rows if r.name == "yours" + suffix)
        ceiling = next(r for r in rows if r.name == bench.STREAM_NAME + suffix)
        ratio = ceiling.ms / yours.ms
        ratios.append(ratio)
        parts.append(f"{N}x{C}: {yours.ms * 1e3:.1f} us against the ceiling's "
                     f"{ceiling.ms * 1e3:.1f} us ({100 * ratio:.1f} %)"
                     + (" ~noisy" if yours.noisy or ceiling.noisy else ""))
    score = 100 * math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    said = f"{score:.1f} % of the same-bytes ceiling ({'; '.join(parts)}), measured in this run"
    if score > SCORE_MAX:
        return not_verified(f"{said}: faster than the ceiling by more than {SCORE_MAX - 100:g} %, "
                            "which a kernel moving the same bytes cannot be: a timing fault. Run "
                            "the check again")
    if score >= target:
        return Verdict(True, f"{said}: at or above the target of {target:g} %", score=score)
    hint = ("Which choice keeps fewer bytes in flight than the plan's? "
            "(lesson 09: K, prefetch, per_sm)")
    return Verdict(False, f"{said}: below the target of {target:g} %. {hint}", score=score)
