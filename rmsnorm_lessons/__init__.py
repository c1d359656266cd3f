"""rmsnorm-lessons: helpers for the PyCUDA course on the RMSNorm backward kernel.

``import rmsnorm_lessons as rl`` gives the reference math (``rl.reference``), the version ladder and
``rl.kernels.run``, building (``rl.build``), the GPU (``rl.gpu``), checking (``rl.check``) and timing
(``rl.bench``). Nothing here touches a GPU until asked to; see ``python -m rmsnorm_lessons info``.
"""
from . import bf16, build, check, gpu, kernels, reference
from .gpu import GpuUnavailable

__all__ = ["bf16", "build", "check", "gpu", "kernels", "reference", "GpuUnavailable"]
__version__ = "0.1.0"
