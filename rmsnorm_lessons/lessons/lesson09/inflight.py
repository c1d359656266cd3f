"""Bytes in flight (lesson 09): Little's law, a pointer chase for the latency, and ``y = a * x``
four ways.

Little's law: a memory system that answers each request after ``latency`` seconds delivers at most
``bytes in flight / latency`` bytes per second. To stream at a bandwidth B a kernel must keep
``B x latency`` bytes of loads outstanding. The kernels are in ``kernels/bytes_in_flight.cu``:

- ``pointer_chase``: one thread, one load in flight at a time: time per hop = the latency of one
  access;
- ``scale_f32_x1`` .. ``scale_f128_x4``: ``y = a * x`` with 4- or 16-byte loads, 1 or 4 loads issued
  per thread before the first is used. A grid-stride loop, so the grid (blocks per SM) sets the
  threads each SM holds, and with it the bytes in flight per SM: threads x width x loads.

The arithmetic needs no GPU; :func:`latency_ns` and :func:`time_scale` do. What :func:`chase` and
:func:`time_scale` measure in this process is kept (:func:`this_run`): the lesson's decision and its
questions read it, and without a GPU the saved run of the same cells (:func:`saved_run`).
"""
from __future__ import annotations

import functools
from dataclasses import asdict, dataclass

import numpy as np

from ...core import build, gpu

KERNEL_FILE = "bytes_in_flight"
#: variant -> (bytes per load, loads issued per thread before the first use)
VARIANTS = {"scale_f32_x1": (4, 1), "scale_f32_x4": (4, 4), "scale_f128_x1": (16, 1),
            "scale_f128_x4": (16, 4)}
BLOCK = 256  # threads per block of every scale launch
#: the pointer chase: one node per 128-byte line (a new line each hop), in a buffer far larger than
#: L2
CHASE_STRIDE = 128
CHASE_DRAM_BYTES = 512 * 2**20
CHASE_L2_BYTES = 8 * 2**20
CHASE_L1_BYTES = 16 * 2**10  # fits in the L1 of sm_70..sm_90, whatever the shared-memory carveout
CHASE_STEPS = 20_000


def width_and_loads(variant: str) -> tuple[int, int]:
    """``(bytes per load, loads per thread before the first use)`` of a scale variant."""
    try:
        return VARIANTS[variant]
    except KeyError:
        raise ValueError(f"variant must be one of {', '.join(VARIANTS)}, got {variant!r}") from None


def in_flight_per_sm(variant: str, threads_per_sm: int) -> int:
    """Bytes of loads a scale variant asks for per SM when each SM holds ``threads_per_sm``
    threads."""
    width, loads = width_and_loads(variant)
    return threads_per_sm * width * loads


def needed_in_flight(gbps: float, latency_ns: float) -> float:
    """Little's law: bytes that must be outstanding to move ``gbps`` (1e9 B/s) at ``latency_ns``."""
    return gbps * 1e9 * latency_ns * 1e-9


def predicted_fraction(per_sm_bytes: float, sms: int, latency_ns: float, copy_gbps: float) -> float:
    """Little's law for ``y = a * x``: the loads bring ``sms x per_sm_bytes`` per latency, and as
    many bytes are written as read, so the kernel moves twice its read rate; as a fraction of the
    copy bandwidth (bytes read plus written), at most 1."""
    read_gbps = sms * per_sm_bytes / latency_ns  # bytes per ns = GB/s
    return min(1.0, 2 * read_gbps / copy_gbps)


def chase_chain(nbytes: int, stride: int = CHASE_STRIDE, seed: int = 0) -> np.ndarray:
    """The pointer chase's buffer: ``nbytes / 4`` uint32, one node every ``stride`` bytes; node k
    holds the index (in uint32) of the next node, in a random order that visits every node once
    before it repeats (one cycle), so no prefetcher can guess the next line."""
    if stride % 4 or stride <= 0 or nbytes < 2 * stride:
        raise ValueError("need stride a positive multiple of 4 and nbytes >= 2 * stride, got "
                         f"{stride}, {nbytes}")
    words, step = nbytes // 4, stride // 4
    nodes = words // step
    order = np.random.default_rng(seed).permutation(nodes)
    # start at node 0 (the kernel's j = 0)
    order = np.concatenate([[0], order[order != 0]]).astype(np.uint64)
    chain = np.zeros(words, np.uint32)
    # each node points at the next; the last at node 0
    chain[order * step] = np.roll(order, -1) * step
    return chain


def latency_ns(nbytes: int = CHASE_DRAM_BYTES, steps: int = CHASE_STEPS,
               stride: int = CHASE_STRIDE, l1: bool = False) -> float:
    """The time of one dependent load, in ns, following a random chain over ``nbytes`` (GPU).

    Far larger than L2 (the default, 512 MiB), nearly every hop goes to DRAM (address translation
    included: 512 MiB is 256 pages of 2 MiB); a chain of at most half of L2 is walked once first,
    and then measures L2. ``steps`` should stay below the chain's nodes, so no line is visited
    twice. ``l1``: load through L1 (``__ldca``; a chain of :data:`CHASE_L1_BYTES` then measures
    L1); by default ``__ldcg`` keeps L1 out."""
    drv = gpu.driver()
    chase = build.source_module(KERNEL_FILE).get_function("pointer_chase_l1" if l1 else
                                                          "pointer_chase")
    chain = drv.to_device(chase_chain(nbytes, stride))
    out = drv.mem_alloc(4)
    # warm-up: a chain that fits in L2 is walked once whole, so the timed walk (from node 0 again)
    # finds every line there; a larger one only a few steps (those few lines are all the timed walk
    # finds in L2)
    warm = nbytes // stride if 2 * nbytes <= gpu.facts().l2_bytes else 16
    try:
        chase(chain, np.int64(warm), out, block=(1, 1, 1), grid=(1, 1))
        with gpu.Timer() as t:
            chase(chain, np.int64(steps), out, block=(1, 1, 1), grid=(1, 1))
        return t.ms * 1e6 / steps
    finally:
        chain.free()
        out.free()


@dataclass(frozen=True)
class Chase:
    """The latency of one dependent load from each level, in ns (:func:`chase`)."""

    l1_ns: float
    l2_ns: float
    dram_ns: float


def chase(steps: int = CHASE_STEPS) -> Chase:
    """Three pointer chases (GPU): a chain of :data:`CHASE_L1_BYTES` through L1, one of
    :data:`CHASE_L2_BYTES` in L2, one of :data:`CHASE_DRAM_BYTES` that misses L2. Kept as this
    process's chase (:func:`this_run`)."""
    levels = Chase(l1_ns=latency_ns(CHASE_L1_BYTES, steps, l1=True),
                   l2_ns=latency_ns(CHASE_L2_BYTES, steps), dram_ns=latency_ns(steps=steps))
    _MEASURED["chase"] = levels
    return levels


@functools.lru_cache(maxsize=1)
def _host_input(n_floats: int) -> np.ndarray:
    """x of every scale timing (made once: 64 Mi normal floats take a second to draw)."""
    x = np.random.default_rng(1).standard_normal(n_floats, dtype=np.float32)
    return x


@dataclass(frozen=True)
class ScaleTiming:
    variant: str
    blocks_per_sm: int | None  # None: one thread per element (lesson 00's launch)
    threads_per_sm: int  # resident threads per SM the launch asks for
    in_flight_per_sm: int  # bytes of loads per SM: threads x width x loads
    ms: float
    gbps: float  # bytes read plus written / time
    copy_gbps: float

    @property
    def fraction_of_copy(self) -> float:
        return self.gbps / self.copy_gbps


def time_scale(variant: str, copy_gbps: float, blocks_per_sm: int | None = None,
               n_floats: int = 64 * 2**20,
               repeats: int = 20) -> ScaleTiming:
    """Time ``y = a * x`` on ``n_floats`` floats (256 MiB each way) with a scale variant; the result
    is checked against NumPy first (GPU).

    ``blocks_per_sm``: a grid of SMs x that many blocks of :data:`BLOCK` threads (at most 8: 2048
    threads per SM on sm_80..sm_90); None: one block per :data:`BLOCK` x loads elements, so each
    thread does its loads once and exits (for ``scale_f32_x1`` that is lesson 00's ``scale``)."""
    from ...speed import timing

    width, loads = width_and_loads(variant)
    facts = gpu.facts()
    elements = n_floats * 4 // width  # elements of T
    if blocks_per_sm is None:
        grid = -(-elements // (BLOCK * loads))
        threads = facts.max_threads_per_multiprocessor
    else:
        if not 1 <= blocks_per_sm <= facts.max_threads_per_multiprocessor // BLOCK:
            raise ValueError("blocks_per_sm must be "
                             f"1..{facts.max_threads_per_multiprocessor // BLOCK}")
        grid, threads = facts.multiprocessors * blocks_per_sm, blocks_per_sm * BLOCK
    function = build.source_module(KERNEL_FILE).get_function(variant)
    drv = gpu.driver()
    host = _host_input(n_floats)
    x, y = drv.to_device(host), drv.mem_alloc(host.nbytes)
    try:
        def launch(_):
            function(y, x, np.float32(2.5), np.int64(elements), block=(BLOCK, 1, 1), grid=(grid, 1))

        drv.memset_d32(y, 0x7FC00000, n_floats)  # NaN: an element never written shows
        launch(0)
        got = np.empty_like(host)
        drv.memcpy_dtoh(got, y)
        if not np.array_equal(got, np.float32(2.5) * host):
            raise AssertionError(f"{variant} computed a wrong y (blocks_per_sm={blocks_per_sm})")
        ms = float(np.median(timing.time_ms(launch, repeats=repeats)))
    finally:
        x.free()
        y.free()
    gbps = 2 * host.nbytes / (ms * 1e-3) / 1e9
    timing = ScaleTiming(variant, blocks_per_sm, threads, in_flight_per_sm(variant, threads), ms,
                         gbps, copy_gbps)
    _MEASURED.setdefault("points", {})[variant, blocks_per_sm] = timing
    return timing


# --- what this process measured, else the saved run
# -----------------------------------------------------------

#: this process's chase and scale timings, by (variant, blocks_per_sm): the latest of each
_MEASURED: dict = {}
#: the saved run's file, beside the openings of the same run (rmsnorm_lessons.course.saved)
SAVED_FILE = "lesson09.json"
LESSON00 = ("scale_f32_x1", None)  # lesson 00's launch: one thread per element
#: what the saved run keeps of a ceiling timing
CEILING_FIELDS = ("name", "N", "C", "ms", "bytes", "gbps", "copy_gbps")


@dataclass(frozen=True)
class Run:
    """What lesson 09's cells measured on one GPU: its copy bandwidth, its SMs, the three chases and
    the scale table (:func:`time_scale`'s rows, lesson 00's launch among them); ``source`` says
    where and when ("measured now on ..." or "saved on ..., date")."""

    copy_gbps: float
    sms: int
    chase: Chase
    points: tuple
    source: str
    #: the streaming ceiling's timings (``rl.bench.stream_ceiling``, Explore), if the run timed it
    ceiling: tuple = ()

    def point(self, variant: str, blocks_per_sm: int | None) -> ScaleTiming:
        """The row of ``variant`` at ``blocks_per_sm`` (None: lesson 00's launch)."""
        for p in self.points:
            if (p.variant, p.blocks_per_sm) == (variant, blocks_per_sm):
                return p
        raise LookupError(f"{variant} at {blocks_per_sm} block(s) per SM was not measured in "
                          f"this run ({self.source})")

    def as_dict(self) -> dict:
        d = {"copy_gbps": self.copy_gbps, "sms": self.sms, "chase": asdict(self.chase),
             "points": [asdict(p) for p in self.points]}
        if self.ceiling:
            d["ceiling"] = [{k: getattr(t, k) for k in CEILING_FIELDS} for t in self.ceiling]
        return d

    @classmethod
    def from_dict(cls, d: dict, source: str) -> "Run":
        from ...speed.timing import Timing

        ceiling = tuple(Timing(t["name"], t["N"], t["C"], t["ms"], float("nan"), t["bytes"],
                               t["gbps"], t["copy_gbps"]) for t in d.get("ceiling", ()))
        return cls(float(d["copy_gbps"]), int(d["sms"]), Chase(**d["chase"]),
                   tuple(ScaleTiming(**p) for p in d["points"]), source, ceiling)


def this_run() -> Run | None:
    """What this process measured (a chase and at least one scale row), or None."""
    points = _MEASURED.get("points", {})
    if "chase" not in _MEASURED or not points:
        return None
    copies = sorted(p.copy_gbps for p in points.values())
    facts = gpu.facts()
    return Run(copies[len(copies) // 2], facts.multiprocessors, _MEASURED["chase"],
               tuple(points.values()), f"measured now on {facts.name}",
               tuple(_MEASURED.get("ceiling", ())))


def saved_path(run: str | None = None):
    """``results/<run>/lesson09.json``, beside the run's openings (default: the saved run of
    :data:`rmsnorm_lessons.course.saved.RUN`)."""
    from ...course import saved

    return saved.path(run).with_name(SAVED_FILE)


def saved_run(run: str | None = None) -> Run:
    """The saved run of lesson 09's cells, labelled with its card and date. FileNotFoundError
    where the run has none."""
    import json

    from ...course import saved

    data = json.loads(saved_path(run).read_text(encoding="utf-8"))
    return Run.from_dict(data, f"saved on {saved.label(data)}")


def save(run: Run) -> object:
    """Write ``run`` as the saved run where the lessons' GPU execution asks for it
    (:func:`rmsnorm_lessons.course.saved.save_run`: ``RMSNORM_SAVE_RUN`` set); the file written,
    or None."""
    import datetime
    import json

    from ...course import saved

    name = saved.save_run()
    if name is None:
        return None
    target = saved_path(name)
    target.parent.mkdir(parents=True, exist_ok=True)
    data = dict(run.as_dict(), device=gpu.facts().name, date=datetime.date.today().isoformat(),
                **{"from": "lesson 09's chase and scale cells (rmsnorm_lessons.lessons.lesson09."
                           "inflight.measured)"})
    target.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return target


def measured() -> Run:
    """This process's run where it measured one (also handed to :func:`save`), else the saved
    run."""
    run = this_run()
    if run is None:
        return saved_run()
    save(run)
    return run
