"""The ladder of versions: one module per rung, beside its kernel in ``kernels/``.

A rung's module holds its record (:class:`Rung`), ``plan(N, C, device, ...)`` (the launches, as
data) and ``shared_memory(C, block)``. Read a rung in two files: ``kernels/<name>.cu`` and
``rmsnorm_lessons/core/ladder/<name>.py``; a new rung is those two files and its line in
:data:`RUNGS`.
:func:`rung_from_source` makes a learner's kernel a rung like ours (``like="v3_smem"``).

    >>> from rmsnorm_lessons import ladder
    >>> for launch in ladder.plan("v3_smem", 8192, 1024):
    ...     print(launch)
"""
from __future__ import annotations

import dataclasses
import importlib
from typing import Callable

from .. import gpu
from . import arguments
from .rung import (BF16, CONFIG_TAKERS, FP32, STANDARD_TENSORS, TENSOR_NAMES, Launch, Plan, Rung,
                   Scratch, Tensor, ceil_div, persistent_grid, standard_args, tensor_args)

__all__ = ["BF16", "CONFIG_TAKERS", "FP32", "Launch", "Plan", "RUNGS", "Rung", "SHIPPED", "Scratch",
           "Tensor", "TENSOR_NAMES", "STANDARD_TENSORS", "VERSIONS", "blocks_per_sm", "ceil_div",
           "get", "load_shipped", "persistent_grid", "plan", "register", "rung_from_source",
           "shared_memory", "standard_args", "tensor_args", "unregister", "v7_fast",
           "with_shared_dweight"]

#: the shipped rungs in course order, one line each: the module ``ladder/<name>.py`` whose ``RUNG``
#: it is (a dotted name is imported as it stands)
RUNGS = [
    "v1_naive",
    "v2_warp",
    "v3_smem",
    "v4_vec_bf16",
    "v5_two_pass",
    "v6_last_block",
    "v7_fast",
]

SHIPPED: tuple[Rung, ...] = ()
_rungs: dict[str, Rung] = {}
VERSIONS: tuple[str, ...] = ()


def _module(entry: str):
    return importlib.import_module(entry if "." in entry else f"{__name__}.{entry}")


def load_shipped() -> tuple[Rung, ...]:
    """(Re)read :data:`RUNGS` into the ladder; registered rungs stay. Runs on import."""
    global SHIPPED, VERSIONS
    registered = {n: r for n, r in _rungs.items() if all(n != s.name for s in SHIPPED)}
    SHIPPED = tuple(_module(entry).RUNG for entry in RUNGS)
    CONFIG_TAKERS[:] = [r.name for r in SHIPPED if r.config_check is not None]
    _rungs.clear()
    _rungs.update({r.name: r for r in SHIPPED})
    _rungs.update({n: r for n, r in registered.items() if n not in _rungs})
    VERSIONS = tuple(_rungs)
    return SHIPPED


load_shipped()


def get(version) -> Rung:
    """The :class:`Rung` of a version name (or the rung itself): the package's one lookup by
    name."""
    if isinstance(version, Rung):
        return version
    if not isinstance(version, str):
        raise TypeError("version must be a version name (str) or a Rung, got "
                        f"{type(version).__name__} {version!r}")
    try:
        return _rungs[version]
    except KeyError:
        raise ValueError(f"version must be one of {', '.join(VERSIONS)}; got {version!r}") from None


def register(rung: Rung, replace: bool = False) -> Rung:
    """Add ``rung`` to the ladder: ``run``, ``check``, ``bench``, ``sass`` and ``occupancy`` then
    take its name.

    A shipped rung cannot be replaced; a registered one can, with ``replace=True`` (a learner
    re-running the cell that defines it).
    """
    global VERSIONS
    if not isinstance(rung, Rung):
        raise TypeError(f"register takes a Rung, got {type(rung).__name__}")
    if rung.name in _rungs:
        if any(r.name == rung.name for r in SHIPPED):
            raise ValueError(f"{rung.name!r} is a shipped rung; give yours another name")
        if not replace and _rungs[rung.name] != rung:
            raise ValueError(f"a rung named {rung.name!r} is registered already; pass replace=True "
                             "to replace it")
    _rungs[rung.name] = rung
    VERSIONS = tuple(_rungs)
    return rung


def v4_interleaved() -> Rung:
    """Register (again, harmlessly) and return ``v4_interleaved``: v4 built with its dweight staged
    at slot c (an 8-way bank conflict), the layout lesson 06 times against the shipped
    channel-planar one."""
    return register(_module("v4_vec_bf16").INTERLEAVED_RUNG, replace=True)


def unregister(name: str) -> None:
    """Remove a registered (not shipped) rung."""
    global VERSIONS
    if any(r.name == name for r in SHIPPED):
        raise ValueError(f"{name!r} is a shipped rung and stays on the ladder")
    _rungs.pop(name, None)
    VERSIONS = tuple(_rungs)


_UNSET = object()
#: what a rung made without ``like`` has where the caller says nothing
_FROM_SCRATCH = dict(c_multiple=1, deterministic=False, block_size=256)


def rung_from_source(*, name: str, source: str, like=None, plan: Callable = _UNSET, kernels=_UNSET,
                     dtype=_UNSET, adds: str = "a learner's kernel", register_it: bool = True,
                     **fields) -> Rung:
    """A rung whose CUDA is the text ``source`` (a notebook cell), registered unless
    ``register_it=False``.

    ``like``: a rung (or its name) this one copies: its plan, kernels, dtype, C rule, block sizes,
    shared memory, determinism, mode, defines and config check, replaced by the learner's ``source``
    and by what is given here. Without ``like``, ``plan``, ``kernels`` and ``dtype`` are required,
    and the other fields of :class:`Rung` take their defaults (C any multiple of 1, blocks of 256,
    not deterministic).
    ``plan(N, C, device, *, block, overwrite, config)`` returns the :class:`Launch` list, exactly as
    the shipped rungs' plans do.
    """
    if not isinstance(source, str) or not source.strip():
        raise ValueError("source must be the kernel's CUDA C text")
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"name must be a plain identifier (letters, digits, _), got {name!r}")
    allowed = {f.name for f in dataclasses.fields(Rung)} - {"name", "adds", "source", "file"}
    unknown = sorted(set(fields) - allowed)
    if unknown:
        raise TypeError(f"rung_from_source got unknown field(s) {', '.join(unknown)}; a Rung has "
                        f"{', '.join(sorted(allowed))}")
    given = {k: v for k, v in (("plan", plan), ("kernels", kernels), ("dtype", dtype))
             if v is not _UNSET}
    given.update({k: v for k, v in fields.items() if v is not None or k == "config_check"})
    if like is None:
        missing = [k for k in ("plan", "kernels", "dtype") if k not in given]
        if missing:
            raise TypeError(f"rung_from_source needs {', '.join(missing)} (or like=, a rung to "
                            "copy them from)")
        rung = Rung(name=name, adds=adds, source=source, **{**_FROM_SCRATCH, **given})
    else:
        rung = dataclasses.replace(get(like), name=name, adds=adds, source=source, file=None,
                                   **given)
    return register(rung, replace=True) if register_it else rung


def _device(device):
    """``device``, else the target's facts (:func:`rmsnorm_lessons.core.devices.facts_for_target`)
    on
    this GPU, else on the saved H200 facts."""
    return device if device is not None else gpu.target_facts_or_fallback()[0]


def plan(version, N: int, C: int, device=None, *, block_size: int | None = None,
         overwrite: bool = False,
         config=None) -> Plan:
    """The launches of one call at (N, C): on ``device`` (default: the target's facts on this GPU,
    else on the saved H200 facts); a rung that chooses among paths says which in ``.path``.

    The arguments are checked as ``run()`` checks them (N and C whole numbers, C by the rung's
    rule, the mode, the config), except that a block may be any multiple of 32 up to 1024 and the
    shared memory a launch asks for is data: whether a launch fits the kernel's launch bounds and
    the device is the launcher's check, so a plan can show a launch that cannot run (lesson 04's
    explorer and :mod:`rmsnorm_lessons.inspection.occupancy` ask "what if")."""
    rung = get(version)
    N, C = arguments.whole("N", N), arguments.whole("C", C, 1)
    # a config where the rung takes none is refused here; the rung's plan judges the rest
    block, overwrite = arguments.options(rung, block_size, overwrite, config, most=1024)
    arguments.size(rung, N, C)
    if N == 0:
        return Plan([], None, "N = 0: no rows, nothing is launched")
    launches = rung.plan(N, C, _device(device), block=block, overwrite=overwrite, config=config)
    return Plan(launches, getattr(launches, "path", None), getattr(launches, "why", None))


def shared_memory(version, C: int, block_size: int | None = None) -> int:
    """Bytes of dynamic shared memory the version's main kernel asks for at this C (its C rule and
    the block size checked; the need is returned even where no GPU gives a block that much)."""
    rung = get(version)
    C = arguments.whole("C", C, 1)
    arguments.size(rung, 1, C)
    return int(rung.shared_memory(C, arguments.block_size(rung, block_size, most=1024)))


def with_shared_dweight() -> tuple[str, ...]:
    """The shipped rungs whose blocks sum dweight in dynamic shared memory that grows with C and
    that have no variants (v3..v6 today: v7's variants trade that memory for row groups)."""
    return tuple(r.name for r in SHIPPED if r.config_check is None
                 and shared_memory(r, 4096) > shared_memory(r, 1024) > 0)


def blocks_per_sm(version, C: int, device=None, block_size: int | None = None) -> float:
    """Blocks per SM the plan launches for a large N (rows enough for every block), read from the
    plan."""
    device = _device(device)
    first = plan(version, 1 << 24, C, device, block_size=block_size)[0]
    return first.grid / device.multiprocessors
