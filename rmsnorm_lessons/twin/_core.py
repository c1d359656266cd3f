"""The twin's one door to the core wing: everything it uses from the rest of the package.

The twin is a wing of its own (``rmsnorm_lessons.WINGS``: beside inspection, above core); it
imports only core, and only here.
"""
from __future__ import annotations

from ..core import bf16, build, compare, devices, gpu, ladder, reference  # noqa: F401
from ..core.build import cache_dir, included_files, kernel_text  # noqa: F401
from ..core.ladder import Launch, Scratch, Tensor  # noqa: F401

__all__ = ["Launch", "Scratch", "Tensor", "bf16", "build", "cache_dir", "compare", "devices",
           "gpu", "included_files", "kernel_text", "ladder", "reference"]
