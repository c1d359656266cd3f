"""A call's sizes and options checked against a rung, before anything touches the GPU: the row count
and width, the block size, the mode, the config, and shared memory no GPU could give. Errors are
``TypeError`` (wrong kind of thing) or ``ValueError`` (range, a rung's rule), and each message names
the argument and the rule. :mod:`rmsnorm_lessons.core.validate` adds the checks of the arrays
themselves.
"""
from __future__ import annotations

import numpy as np

from .. import devices
from .rung import Rung

MAX_C = 1 << 30  # kernels index a row's columns with int, stepping by up to 1024 past the last one
MAX_N = (1 << 31) - 1  # kernels take N as int


def whole(name: str, value, least: int = 0) -> int:
    """``value`` as an int if it is a whole number (not a bool, not a float) of at least ``least``;
    else a TypeError or ValueError naming ``name``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value < least:
        raise ValueError(f"{name} must be at least {least}, got {value}")
    return int(value)


def block_size(rung_: Rung, value, most: int | None = None) -> int:
    """The block size to launch: the rung's default for None, else an int multiple of 32 from 32
    to ``most`` (default: the rung's __launch_bounds__; a plan, which may show a launch that cannot
    run, takes up to 1024, the hardware's limit)."""
    if value is None:
        return rung_.block_size
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError("block_size must be an int (threads per block) or None, got "
                        f"{type(value).__name__} {value!r}")
    value = int(value)
    most = rung_.max_block if most is None else most
    if value % 32 or not 32 <= value <= most:
        bounds = " (its __launch_bounds__)" if most < 1024 else ""
        raise ValueError(f"block_size for {rung_.name} must be a multiple of 32 from 32 to "
                         f"{most}{bounds}, got {value}")
    return value


def size(spec: Rung, N: int, C: int) -> None:
    """N and C within what the kernels index, and C by the version's rule (ValueError naming the
    rule)."""
    if C < 1:
        raise ValueError(f"C (the last dim of inp) must be at least 1, got {C}")
    if C > MAX_C:
        raise ValueError("C (the last dim of inp) must be at most 2**30 (kernels index columns "
                         f"with int), got {C}")
    if C % spec.c_multiple:
        raise ValueError(f"{spec.name} needs C to be a multiple of {spec.c_multiple} (128-bit "
                         f"loads of {spec.c_multiple} values), got C={C}")
    if N > MAX_N:
        raise ValueError(f"N (rows) must be below 2**31 (kernels take it as int), got {N}")


def shared_memory(spec: Rung, C: int, block: int) -> int:
    """The dynamic shared memory ``spec`` asks for at width ``C`` in blocks of ``block``; a
    ValueError where no GPU the course knows (devices.LIMITS, sm_75 to sm_120) gives a block that
    much, so a C that cannot run anywhere is refused without asking the device. The device's own
    limit is the launcher's check."""
    need = spec.shared_memory(C, block)
    most = max(limits.shared_per_block_optin for limits in devices.LIMITS.values())
    if need > most:
        raise ValueError(f"{spec.name} at C={C} needs {need} bytes of dynamic shared memory per "
                         f"block (block of {block}); no GPU allows a block more than {most} bytes")
    return need


def flag(name: str, value) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {type(value).__name__} {value!r}")
    return bool(value)


def options(spec: Rung, block, overwrite, config, most: int | None = None) -> tuple[int, bool]:
    """The launch options of one call, checked against the rung: ``(block, overwrite)``. A
    ``config`` is refused here where the rung takes none; whether it fits a width C the rung itself
    judges (:meth:`~rmsnorm_lessons.core.ladder.Rung.check_config`, once C is known). ``most``: as
    :func:`block_size`'s."""
    block = block_size(spec, block, most)
    overwrite = flag("overwrite", overwrite)
    if overwrite and not spec.overwrite_mode:
        raise ValueError(f"overwrite=True (dinp = instead of +=) is not offered by {spec.name}")
    spec.check_config(config)
    return block, overwrite
