"""What ncu measured on one launch, as data: :class:`Profile`, the metrics it is read from, and its
JSON form (a saved run keeps profiles as :meth:`Profile.as_dict`).

The first fields are the ones every lesson reads (duration, DRAM throughput, achieved occupancy,
warp stall reasons); the others (:data:`EXTRA`) count bytes, sectors and wavefronts. ncu refuses a
whole call when it does not know one metric name, so :mod:`rmsnorm_lessons.inspection.nsight` asks
only for the ones this ncu knows: a field ncu did not measure is None, and ``missing`` says why.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field

DRAM = "dram__throughput.avg.pct_of_peak_sustained_elapsed"  # DRAM throughput, % of its peak
# achieved occupancy, % of the SM's warps
OCCUPANCY = "sm__warps_active.avg.pct_of_peak_sustained_active"
DURATION = "gpu__time_duration.sum"  # the kernel's time
#: warp stall reasons: warps stalled for this reason per issued instruction (Warp State Statistics);
#: they add up to the cycles between two instructions a warp issues
STALLS = "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\\.ratio"
_STALL = re.compile(r"^smsp__average_warps_issue_stalled_(?P<reason>.+)_per_issue_active\.ratio$")
#: the metrics every profile asks for (the lessons' first four columns)
BASE = (DRAM, OCCUPANCY, DURATION, STALLS)

#: field of :class:`Profile` -> (ncu metric, what it means, shown to the learner)
EXTRA = {
    "dram_read_bytes": ("dram__bytes_read.sum", "bytes read from DRAM"),
    "dram_write_bytes": ("dram__bytes_write.sum", "bytes written to DRAM"),
    "load_efficiency_pct": ("smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.pct",
                            "% of each fetched 32-byte sector's bytes a global load used"),
    "red_sectors": ("lts__t_sectors_op_red.sum",
                    "L2 sectors touched by global reductions (atomics whose result is unused)"),
    "atom_sectors": ("lts__t_sectors_op_atom.sum",
                     "L2 sectors touched by global atomics that return a value"),
    "l2_pct": ("lts__throughput.avg.pct_of_peak_sustained_elapsed", "L2 busy, % of its peak"),
    "bank_conflicts": ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum",
                       "extra shared-memory passes (wavefronts) caused by bank conflicts"),
    "shared_wavefronts": ("l1tex__data_pipe_lsu_wavefronts_mem_shared.sum",
                          "shared-memory passes (wavefronts), the extra ones included"),
}
#: the fields that add up over the launch: per element they are divided by N x C
SUMS = ("dram_read_bytes", "dram_write_bytes", "dram_bytes", "red_sectors", "atom_sectors",
        "bank_conflicts", "shared_wavefronts")
NOT_MEASURED = "not measured by this ncu"


def base_name(metric: str) -> str:
    """The name ``ncu --query-metrics`` lists for a metric: without its suffixes (``.sum``,
    ``.avg.pct_of_peak_sustained_elapsed``)."""
    return metric.split(".", 1)[0]


@dataclass
class Profile:
    """What ncu measured on one launch of one kernel: of a rung (``version``) or of a lesson's
    kernel that is not one (:class:`rmsnorm_lessons.inspection.nsight.Probe`)."""

    version: str
    kernel: str
    shape: tuple
    dram_pct: float | None  # DRAM throughput, % of peak
    occupancy_pct: float | None  # achieved occupancy, % of the SM's warp slots
    duration_us: float | None
    stalls: dict = field(default_factory=dict)  # reason -> warps stalled per issued instruction
    dram_read_bytes: float | None = None
    dram_write_bytes: float | None = None
    load_efficiency_pct: float | None = None
    red_sectors: float | None = None
    atom_sectors: float | None = None
    l2_pct: float | None = None
    bank_conflicts: float | None = None
    shared_wavefronts: float | None = None
    #: field -> why it has no value ("not measured by this ncu", "not in the saved run")
    missing: dict = field(default_factory=dict)

    def top_stalls(self, k: int = 3) -> list[tuple[str, float, float]]:
        """``(reason, stalled warps per issued instruction, % of all stalls)``, largest first
        ("selected" is issuing, not a stall, and left out)."""
        items = [(r, v) for r, v in self.stalls.items() if v is not None and r != "selected"]
        total = sum(v for _, v in items) or 1.0
        items = sorted(((r, v) for r, v in items if r != UNLISTED), key=lambda t: -t[1])
        return [(r, v, 100.0 * v / total) for r, v in items[:k]]

    def stall_share(self, reason: str) -> float | None:
        """``reason``'s share of all stalls, in %: 0 where ncu reported the reasons and not this
        one; None where the profile lists only some of them (a saved run's top three) and not
        this one."""
        shares = {r: s for r, _, s in self.top_stalls(len(self.stalls))}
        if reason == UNLISTED and UNLISTED in self.stalls:
            total = sum(v for r, v in self.stalls.items() if v is not None and r != "selected")
            return 100.0 * self.stalls[UNLISTED] / (total or 1.0)
        if reason in shares:
            return shares[reason]
        return None if (UNLISTED in self.stalls or not self.stalls) else 0.0

    def stall_share_at_most(self, reason: str) -> float:
        """The largest share ``reason`` can have: its share where known, else what the listed
        reasons leave (and no more than the smallest listed one, since the list is the top)."""
        known = self.stall_share(reason)
        if known is not None:
            return known
        shares = [s for _, _, s in self.top_stalls(len(self.stalls))]
        rest = self.stall_share(UNLISTED) or 0.0
        return min([rest] + shares[-1:]) if shares else 100.0

    @property
    def dram_bytes(self) -> float | None:
        """Bytes read plus written in DRAM (None where ncu measured either not)."""
        if self.dram_read_bytes is None or self.dram_write_bytes is None:
            return None
        return self.dram_read_bytes + self.dram_write_bytes

    @property
    def elements(self) -> int:
        return int(self.shape[0]) * int(self.shape[1])

    def per_element(self, name: str) -> float | None:
        """A field that adds up over the launch (:data:`SUMS`), over N x C; None where it was not
        measured."""
        if name not in SUMS:
            raise ValueError(f"per_element takes one of {', '.join(SUMS)}, got {name!r}")
        value = getattr(self, name)
        return None if value is None else value / self.elements

    @property
    def atomic_sectors_per_element(self) -> float | None:
        """L2 sectors of global reductions and atomics per element (reductions alone where ncu
        gave no count of the returning kind); None where it counted neither."""
        red = self.per_element("red_sectors")
        if red is None:
            return None
        return red + (self.per_element("atom_sectors") or 0.0)

    @property
    def conflicts_per_wavefront(self) -> float | None:
        """Bank conflicts per conflict-free shared-memory pass: the extra wavefronts over the
        ones a conflict-free access would need (an 8-way conflict: 7; none: 0)."""
        if self.bank_conflicts is None or self.shared_wavefronts is None:
            return None
        ideal = self.shared_wavefronts - self.bank_conflicts
        return self.bank_conflicts / ideal if ideal > 0 else 0.0

    def why_missing(self, name: str) -> str:
        """Why field ``name`` has no value (:data:`NOT_MEASURED` unless ``missing`` says)."""
        if name == "dram_bytes":
            name = "dram_read_bytes" if self.dram_read_bytes is None else "dram_write_bytes"
        if name == "conflicts_per_wavefront":
            name = "bank_conflicts" if self.bank_conflicts is None else "shared_wavefronts"
        if name == "atomic_sectors_per_element":
            name = "red_sectors"
        return self.missing.get(name, NOT_MEASURED)

    def as_dict(self) -> dict:
        """JSON-safe: the fields, the shape as a list."""
        d = dataclasses.asdict(self)
        d["shape"] = [int(x) for x in self.shape]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Profile":
        """The profile :meth:`as_dict` wrote (unknown keys refused, naming them)."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ValueError(f"a saved profile has unknown field(s) {', '.join(unknown)}")
        return cls(**{**d, "shape": tuple(d["shape"]), "stalls": dict(d.get("stalls") or {}),
                      "missing": dict(d.get("missing") or {})})


#: a saved profile that lists only its top stall reasons keeps the rest of the stalls under this
#: name, so the listed shares stay what ncu measured
UNLISTED = "unlisted"


def _duration_us(value, unit):
    if value is None:
        return None
    scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3,
             "s": 1e6, "second": 1e6}
    return value * scale.get((unit or "ns").strip(), 1e-3)


_BYTES = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "KB": 1e3, "MB": 1e6, "GB": 1e9,
          "Kibyte": 2**10, "Mibyte": 2**20, "Gibyte": 2**30}


def to_profile(entry: dict, version: str, shape, asked=None) -> Profile:
    """A :class:`Profile` of one kernel's row of ncu's CSV (:func:`.nsight_csv.parse_csv`).
    ``asked``: the metrics the call asked for (default: all); a field whose metric was not asked,
    or not answered, is None with ``missing`` saying so."""
    m, u = entry["metrics"], entry["units"]
    stalls = {}
    for name, value in m.items():
        hit = _STALL.match(name)
        if hit:
            stalls[hit.group("reason")] = value
    extra, missing = {}, {}
    asked = set(asked) if asked is not None else {metric for metric, _ in EXTRA.values()}
    for name, (metric, _) in EXTRA.items():
        value = m.get(metric) if metric in asked else None
        if value is not None and name.endswith("_bytes"):
            value *= _BYTES.get((u.get(metric) or "byte").strip(), 1)
        extra[name] = value
        if value is None:
            missing[name] = NOT_MEASURED
    return Profile(version, entry["kernel"], tuple(shape), m.get(DRAM), m.get(OCCUPANCY),
                   _duration_us(m.get(DURATION), u.get(DURATION)), stalls, **extra,
                   missing=missing)
