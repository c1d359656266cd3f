"""The twin's one door to the core wing: everything it uses from the rest of the package.

The twin is a wing of its own (it imports only core). Until the package is split into wings its
core modules sit at their flat paths; after the split only these imports change.
"""
from __future__ import annotations

from .. import bf16, build, check, devices, gpu, ladder, reference  # noqa: F401
from ..build import cache_dir, included_files, kernel_text  # noqa: F401
from ..ladder import Launch, Scratch, Tensor  # noqa: F401

__all__ = ["Launch", "Scratch", "Tensor", "bf16", "build", "cache_dir", "check", "devices", "gpu",
           "included_files", "kernel_text", "ladder", "reference"]
