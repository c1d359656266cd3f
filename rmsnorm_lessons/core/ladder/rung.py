"""What every rung is made of: its record (:class:`Rung`) and its plan's vocabulary
(:class:`Launch`).

A plan is data: the kernels to launch, in order, each with its grid, block, dynamic shared memory
and arguments by name. The launcher (:mod:`rmsnorm_lessons.core.launch`) executes it; a notebook
prints it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..bf16 import bfloat16

FP32 = np.dtype(np.float32)
BF16 = bfloat16
#: the tensors of one backward call, in the order every kernel of the course takes them
TENSOR_NAMES = ("dinp", "dweight", "dout", "inp", "weight", "rstd")


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class Tensor:
    """An argument that is one of the call's tensors (``dinp``, ``dweight``, ``dout``, ``inp``,
    ...)."""

    name: str

    def __post_init__(self):
        if self.name not in TENSOR_NAMES:
            raise ValueError(f"Tensor name must be one of {', '.join(TENSOR_NAMES)}, got "
                             f"{self.name!r}")

    def __repr__(self) -> str:
        return self.name


@dataclass(frozen=True)
class Scratch:
    """A device buffer the launcher owns and reuses across calls.

    ``zero``: ``"none"`` (the plan writes it before reading it), ``"once"`` (zeroed when allocated:
    the kernel leaves it at zero, like v6's ticket counter) or ``"each"`` (zeroed before every
    call, on the call's stream).
    """

    name: str
    nbytes: int
    zero: str = "none"

    def __post_init__(self):
        if self.zero not in ("none", "once", "each"):
            raise ValueError(f"Scratch zero must be 'none', 'once' or 'each', got {self.zero!r}")

    def __repr__(self) -> str:
        return (f"scratch {self.name!r} ({self.nbytes} "
                f"B{', zeroed ' + self.zero if self.zero != 'none' else ''})")


@dataclass(frozen=True)
class Launch:
    """One kernel launch of a plan: ``args`` are (parameter name, value) pairs in the kernel's
    order; a value is a :class:`Tensor`, a :class:`Scratch` or an ``int`` (passed as a 32-bit
    int)."""

    kernel: str
    grid: int
    block: int
    shared: int  # bytes of dynamic shared memory
    args: tuple

    def __str__(self) -> str:
        args = ", ".join(f"{name}={value!r}" for name, value in self.args)
        return f"{self.kernel}<<<{self.grid}, {self.block}, {self.shared}>>>({args})"


class Plan(list):
    """A plan's launches (a list of :class:`Launch`) with the path it took and why, where the rung
    chooses among kernels (v7_fast: ``"register"``, ``"cp.async"`` or ``"cluster"``)."""

    def __init__(self, launches=(), path: str | None = None, why: str | None = None):
        super().__init__(launches)
        self.path, self.why = path, why


def tensor_args(*names: str) -> tuple:
    """``(("dinp", Tensor("dinp")), ...)`` for the named tensors, in the order given."""
    return tuple((n, Tensor(n)) for n in names)


#: the argument list of v1..v3 (and of most learners' kernels): the six tensors, then N and C
STANDARD_TENSORS = TENSOR_NAMES


def standard_args(N: int, C: int) -> tuple:
    return tensor_args(*STANDARD_TENSORS) + (("N", int(N)), ("C", int(C)))


def persistent_grid(N: int, block: int, multiprocessors: int, per_sm: int) -> int:
    """A grid of ``per_sm`` blocks per SM whose warps take a row each, never more blocks than rows
    need."""
    return max(1, min(multiprocessors * per_sm, ceil_div(N, block // 32)))


#: the shipped rungs that take a ``config``, named where another rung refuses one (the ladder fills
#: it)
CONFIG_TAKERS: list[str] = []


def _no_shared_memory(C: int, block: int) -> int:
    return 0


@dataclass(frozen=True, kw_only=True)
class Rung:
    """One version of the kernel: what it adds, what it stores, how it is launched.

    ``plan(N, C, device, *, block, overwrite, config) -> list[Launch]`` and
    ``shared_memory(C, block) -> bytes`` are the rung module's functions. ``source`` holds the CUDA
    text of a rung made from a notebook cell; shipped rungs read ``kernels/<name>.cu``. ``defines``
    are passed as ``-DNAME=value`` to every build of the rung, so a constant shared by Python and
    CUDA lives once.
    """

    name: str
    adds: str
    dtype: np.dtype
    c_multiple: int  # C must be a multiple of this (8 for 128-bit loads of bf16)
    deterministic: bool  # bitwise-identical outputs on every run
    block_size: int  # default threads per block
    kernels: tuple  # the extern "C" entry points the plan launches
    plan: Callable
    shared_memory: Callable = _no_shared_memory
    max_block: int = 1024  # the kernels' __launch_bounds__ (1024: none)
    overwrite_mode: bool = False  # offers dinp = (instead of +=)
    source: str | None = None
    defines: dict = field(default_factory=dict)
    # the kernels/<file>.cu it is built from (default: its name), where source is None
    file: str | None = None
    #: ``config_check(config, C, block, overwrite)`` raises where ``config`` is not one of this
    #: rung's variants at that launch; None: the rung takes no ``config``
    config_check: Callable | None = None

    def __post_init__(self):
        where = f"rung {self.name!r}"
        if isinstance(self.kernels, str) or not all(isinstance(k, str) and k.isidentifier()
                                                    for k in self.kernels):
            raise TypeError(f"{where}: kernels must be a tuple of entry-point names (e.g. "
                            f"kernels=(\"my_kernel\",)), got {self.kernels!r}")
        object.__setattr__(self, "dtype", np.dtype(self.dtype))
        object.__setattr__(self, "kernels", tuple(self.kernels))
        object.__setattr__(self, "defines", dict(self.defines))
        if not self.kernels:
            raise ValueError(f"{where}: kernels must name at least one entry point")
        if self.dtype not in (FP32, BF16):
            raise ValueError(f"{where}: dtype must be float32 or bfloat16, got {self.dtype}")
        for name, least in (("c_multiple", 1), ("max_block", 32), ("block_size", 32)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise TypeError(f"{where}: {name} must be an int, got {value!r}")
            if value < least:
                raise ValueError(f"{where}: {name} must be at least {least}, got {value}")
        for name in ("max_block", "block_size"):
            if getattr(self, name) % 32 or getattr(self, name) > 1024:
                raise ValueError(f"{where}: {name} must be a multiple of 32 up to 1024 (threads "
                                 f"per block), got {getattr(self, name)}")
        if self.block_size > self.max_block:
            raise ValueError(f"{where}: block_size {self.block_size} is above max_block "
                             f"{self.max_block} (the kernels' __launch_bounds__)")
        for name in ("plan", "shared_memory"):
            if not callable(getattr(self, name)):
                raise TypeError(f"{where}: {name} must be a function, got "
                                f"{getattr(self, name)!r}")
        if self.config_check is not None and not callable(self.config_check):
            raise TypeError(f"{where}: config_check must be a function or None, got "
                            f"{self.config_check!r}")

    def check_config(self, config, C: int | None = None, block: int = 0,
                     overwrite: bool = False) -> None:
        """A ValueError where ``config`` is not a variant of this rung (None always is); with ``C``,
        also where it is not one this rung launches at (C, block, overwrite)."""
        if config is None:
            return
        if self.config_check is None:
            takers = " and ".join(CONFIG_TAKERS) or "other rungs"
            raise ValueError(f"config is for {takers}'s variants; {self.name} takes none")
        if C is not None:
            self.config_check(config, int(C), int(block), bool(overwrite))

    @property
    def stem(self) -> str:
        """The file of ``kernels/`` this rung is built from, without ``.cu``."""
        return self.file or self.name

    def __hash__(self):  # defines is a dict; the name identifies a rung in the registry
        return hash((self.name, self.source))

    def bytes_moved(self, N: int, C: int, overwrite: bool = False) -> int:
        """The fewest bytes one call must move through device memory."""
        item = self.dtype.itemsize
        per_row_tensors = 3 if overwrite else 4  # dout, inp, (dinp read), dinp write
        return per_row_tensors * N * C * item + N * 4 + 3 * C * item  # + rstd, weight, dweight r/w
