"""What one SM of each GPU generation offers: the table occupancy's arithmetic and the argument
checks read.

Data only (no compiler, no GPU): :mod:`rmsnorm_lessons.core.validate` refuses a C whose shared
memory no GPU here gives a block, and :mod:`rmsnorm_lessons.inspection.occupancy` computes blocks
per SM from the same rows. The target switch (``RMSNORM_ARCH``, :func:`use_target`) lives here too:
which architecture the rungs are built for, and whose limits plans take (:func:`facts_for_target`).
"""
from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass

DEFAULT_ARCH = "sm_90"
KIB = 1024
ARCH_ENV = "RMSNORM_ARCH"  # the environment's target switch: compute_75, compute_80, ...
_target: list = []  # use_target's choice, where made (it outranks the environment)


@dataclass(frozen=True)
class Limits:
    """What one SM of a target offers (the CUDA programming guide's table, compute capability
    x.y)."""

    arch: str
    shared_per_sm: int  # bytes: the largest shared-memory carveout, the default for occupancy
    # bytes a block may use after opting in (cudaFuncAttributeMaxDynamicSharedMemorySize)
    shared_per_block_optin: int
    carveouts_kib: tuple  # the shared-memory sizes an SM can be configured to
    max_warps_per_sm: int = 64
    max_blocks_per_sm: int = 32
    registers_per_sm: int = 65536
    registers_per_block: int = 65536
    register_unit: int = 256  # a warp's registers are allocated in multiples of this
    sub_partitions: int = 4  # SM quarters; each holds registers_per_sm / 4 and its own warps
    max_registers_per_thread: int = 255
    max_threads_per_block: int = 1024
    shared_per_block: int = 48 * KIB  # without opting in
    # taken by the driver for every block (sm_80 and later; 0 on sm_75)
    reserved_shared_per_block: int = 1 * KIB
    shared_unit: int = 128  # shared memory is allocated in multiples of this
    # sm_90: 2 sets of named barriers per block slot
    barrier_slots_per_block_slot: int | None = None

    @property
    def max_threads_per_sm(self) -> int:
        return 32 * self.max_warps_per_sm


# Per compute capability, from the CUDA C++ Programming Guide, "Compute Capabilities", table
# "Technical Specifications per Compute Capability" (maximum resident blocks, warps and threads per
# SM, registers per SM, per block and per thread, shared memory per SM and per block) and the
# guide's per-architecture sections (the carveouts):
#   https://docs.nvidia.com/cuda/cuda-programming-guide/05-appendices/compute-capabilities.html
# The sm_100 and sm_120 rows were checked against NVIDIA's own copy of that table in CCCL (libcu++,
# libcudacxx/include/cuda/__device/arch_traits.h: arch_traits<arch_id::sm_100> and
# <arch_id::sm_120>):
#   sm_100: 228 KiB shared memory per SM, 227 KiB per block (opt-in), 1 KiB reserved per block,
#           32 blocks and 2048 threads (64 warps) per SM, 64 Ki registers per SM and per block, 255
# per thread;
#   sm_120: 100 KiB shared memory per SM, 99 KiB per block (opt-in), 1 KiB reserved per block,
#           24 blocks and 1536 threads (48 warps) per SM, 64 Ki registers per SM and per block, 255
# per thread. Their carveout lists are those of the same shared-memory size one generation earlier
# (sm_90's for 228 KiB, sm_89's for 100 KiB); only the largest, the default that occupancy uses,
# enters the arithmetic. Named-barrier slots are modelled for sm_90 only (no published figure for
# the others). On a GPU, tests/test_occupancy.py::test_limits_match_the_device compares the row of
# the device's arch with what the driver reports (device_limits()).
# sm_75 (Turing) differs from every later row: the guide's table gives it 16 resident blocks, 32
# warps (1024 threads) and 64 KiB of shared memory per SM, and 64 KiB a block after opting in; its
# compute capability 7.x section gives Turing's carveouts (0, 32 or 64 KiB). The 1 KiB the driver
# keeps per block starts with compute capability 8.0 (the guide's 8.x section; CCCL's
# arch_traits<arch_id::sm_75> agrees on all of these, with reserved_shared_memory_per_block 0
# below sm_80). Shared memory is allocated in units of 256 B there, not 128 (the toolkit's
# include/cuda_occupancy.h, cudaOccSMemAllocationGranularity).
LIMITS = {
    "sm_75": Limits("sm_75", 64 * KIB, 64 * KIB, (0, 32, 64), max_warps_per_sm=32,
                    max_blocks_per_sm=16, reserved_shared_per_block=0,
                    shared_unit=256),  # T4, RTX 20xx
    "sm_80": Limits("sm_80", 164 * KIB, 163 * KIB, (0, 8, 16, 32, 64, 100, 132, 164)),  # A100
    "sm_86": Limits("sm_86", 100 * KIB, 99 * KIB, (0, 8, 16, 32, 64, 100), max_warps_per_sm=48,
                    max_blocks_per_sm=16),  # RTX 30xx, A10, A40
    "sm_89": Limits("sm_89", 100 * KIB, 99 * KIB, (0, 8, 16, 32, 64, 100), max_warps_per_sm=48,
                    max_blocks_per_sm=24),  # RTX 40xx, L4, L40
    "sm_90": Limits("sm_90", 228 * KIB, 227 * KIB, (0, 8, 16, 32, 64, 100, 132, 164, 196, 228),
                    barrier_slots_per_block_slot=2),  # H100, H200
    # B200, GB200
    "sm_100": Limits("sm_100", 228 * KIB, 227 * KIB, (0, 8, 16, 32, 64, 100, 132, 164, 196, 228)),
    "sm_120": Limits("sm_120", 100 * KIB, 99 * KIB, (0, 8, 16, 32, 64, 100), max_warps_per_sm=48,
                     max_blocks_per_sm=24),  # RTX 50xx, RTX PRO 6000 Blackwell
}

#: FP32 lanes per SM: the results of 32-bit floating-point add, multiply and multiply-add per
#: clock cycle per multiprocessor, from the CUDA C++ Programming Guide's table "Throughput of
#: Native Arithmetic Instructions" (section "Arithmetic Instructions"):
#:   https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#arithmetic-instructions
#: Only the rows checked against that table are here; rl.gpu.fp32_peak_flops says None for others.
FP32_LANES_PER_SM = {"sm_75": 64, "sm_80": 64, "sm_86": 128, "sm_89": 128, "sm_90": 128}

#: GPUs of each arch, for tables that a reader matches to a card
GPUS = {
    "sm_75": "T4, RTX 20xx",
    "sm_80": "A100", "sm_86": "RTX 30xx, A10, A40", "sm_89": "RTX 40xx, L4, L40",
        "sm_90": "H100, H200",
    "sm_100": "B200, GB200", "sm_120": "RTX 50xx, RTX PRO 6000",
}
#: the architectures the lessons compare (one per generation a learner is likely to hold)
LESSON_ARCHES = ("sm_80", "sm_89", "sm_90", "sm_100", "sm_120")


def limits(arch: str = DEFAULT_ARCH) -> Limits:
    """The row of ``arch`` (``sm_90a`` and ``compute_90`` read ``sm_90``'s); ValueError naming the
    known ones."""
    try:
        return LIMITS[real_arch(arch)]
    except KeyError:
        raise ValueError(f"no occupancy limits for {arch}; known: {', '.join(LIMITS)}") from None


def real_arch(arch: str) -> str:
    """``sm_NN`` for ``sm_NN``, ``sm_NNa`` or the virtual ``compute_NN``."""
    m = re.fullmatch(r"(?:sm|compute)_(\d{2,3})a?", str(arch))
    return f"sm_{m.group(1)}" if m else str(arch)


def target_facts(device, arch: str, name: str | None = None):
    """``device``'s facts (a :class:`rmsnorm_lessons.core.gpu.DeviceFacts`) as a GPU of ``arch``
    would have them: the compute capability and what :data:`LIMITS` says one SM and one block of
    ``arch`` offer (shared memory, threads, registers) replace the device's; the SM count, L2,
    memory and driver stay the device's own. Clusters measured on the device are kept only for its
    own arch.
    ``name`` (default: ``"<device> as <arch>"``) names the result in plans' messages."""
    arch = real_arch(arch)
    L = limits(arch)
    cc = (int(arch[3:-1]), int(arch[-1]))
    if tuple(device.compute_capability) == cc:
        return device
    return dataclasses.replace(
        device, name=name or f"{device.name} as {arch}", compute_capability=cc,
        shared_memory_per_block=L.shared_per_block,
        shared_memory_per_block_optin=L.shared_per_block_optin,
        shared_memory_per_multiprocessor=L.shared_per_sm,
        max_threads_per_multiprocessor=L.max_threads_per_sm,
        registers_per_multiprocessor=L.registers_per_sm, resident_clusters=())


# --- the target switch: which architecture rungs are built for (rmsnorm_lessons.core.build reads it
# to build PTX) and whose limits plans take (facts_for_target)


class ArchError(ValueError):
    """An architecture spelled otherwise than :func:`parse_arch` takes; the one message says where
    it was given (``RMSNORM_ARCH``, ``--arch``) and what it may be."""


_SPELLING = re.compile(r"(sm|compute)_(\d{2,3})(a?)")


def spellings() -> str:
    """The architectures the course takes, in words: for the one message of :class:`ArchError`."""
    numbers = ", ".join(a[3:] for a in LIMITS)
    specific = ", ".join(f"{a}a" for a in LIMITS if int(a[3:]) >= 90)
    return (f"sm_XY (a GPU's own code) or compute_XY (PTX the driver compiles), XY one of "
            f"{numbers}; from sm_90 also XYa ({specific})")


def parse_arch(arch, where: str = "arch") -> str:
    """The one rule for an architecture, wherever it is given (``$RMSNORM_ARCH``, ``--arch``,
    :func:`use_target`): ``sm_XY``, ``compute_XY`` or, from 90 on, either with ``a``, XY one of
    :data:`LIMITS`' rows. Returns it as written; :class:`ArchError` naming ``where`` otherwise."""
    m = _SPELLING.fullmatch(arch) if isinstance(arch, str) else None
    if m is None or f"sm_{m.group(2)}" not in LIMITS or (m.group(3) and int(m.group(2)) < 90):
        raise ArchError(f"{where}={arch!r} is not an architecture the course builds for: "
                        f"{spellings()}")
    return arch


def check_target(arch, where: str = "arch") -> str | None:
    """The virtual architecture to build PTX for, given ``arch`` in any spelling of
    :func:`parse_arch` (``sm_75`` and ``compute_75`` both give ``compute_75``: the code a T4 runs,
    JIT-compiled by the driver), or None for None; :class:`ArchError` naming ``where``."""
    if arch is None:
        return None
    return "compute_" + parse_arch(arch, where).split("_", 1)[1]


def use_target(arch: str | None) -> None:
    """Build every rung as PTX for ``arch`` (``"compute_75"`` or ``"sm_75"``, ``"compute_80"``...)
    and plan for its limits from now on, whatever ``$RMSNORM_ARCH`` says; None goes back to the
    environment."""
    _target[:] = [] if arch is None else [check_target(arch)]


def target_arch() -> str | None:
    """The virtual architecture rungs are built for (:func:`use_target`'s, else
    ``$RMSNORM_ARCH``'s), or None: cubins for the device itself."""
    if _target:
        return _target[0]
    given = os.environ.get(ARCH_ENV)
    return None if given is None or given == "" else check_target(given, ARCH_ENV)


def facts_for_target(device):
    """``device``'s facts as the target architecture has them (:func:`target_facts`), or as they
    are without a target. A target newer than the device is refused: its PTX cannot run there."""
    if (arch := target_arch()) is None:
        return device
    facts = target_facts(device, arch)
    if tuple(facts.compute_capability) > tuple(device.compute_capability):
        raise ArchError(f"{ARCH_ENV}={arch} is newer than {device.name} ({device.arch}): its "
                        f"PTX cannot run there; choose compute_{device.arch[3:]} or older")
    return facts
