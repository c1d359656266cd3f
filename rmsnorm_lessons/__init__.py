"""rmsnorm-lessons: helpers for the PyCUDA course on the RMSNorm backward kernel.

``import rmsnorm_lessons as rl`` gives the reference math (``rl.reference``), the version ladder and
``rl.kernels.run``, building (``rl.build``), the GPU (``rl.gpu``), checking (``rl.check``) and,
loaded on first use, predictions (``rl.predict``), timing (``rl.bench``), pictures (``rl.plots``),
widgets, exercises, inspection (``rl.sass``,
``rl.occupancy``) and the notebook magic. Nothing here touches a GPU until asked to; see
``python -m rmsnorm_lessons info``.
"""
import importlib

from . import bf16, build, check, devices, gpu, kernels, ladder, launch, reference, validate
from .gpu import GpuUnavailable

_LAZY = ("access", "bench", "cli", "exercises", "lessons", "libcuda", "notebook", "nsight",
         "occupancy",
         "peers", "plots", "predict", "sanitizer", "sass", "widgets")

__all__ = ["bf16", "build", "check", "devices", "gpu", "kernels", "ladder", "launch", "reference",
           "validate", "GpuUnavailable", *_LAZY]
__version__ = "0.1.0"


def __getattr__(name):
    # matplotlib, ipywidgets and torch load only when a lesson asks for them
    if name in _LAZY:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'rmsnorm_lessons' has no attribute {name!r}")
