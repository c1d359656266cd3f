"""rmsnorm-lessons: helpers for the PyCUDA course on the RMSNorm backward kernel.

``import rmsnorm_lessons as rl`` gives the names the lessons use: ``rl.run`` (one backward pass of a
version of the ladder), ``rl.reference`` (the NumPy math), ``rl.ladder``, ``rl.build``, ``rl.gpu``,
``rl.compare`` and, loaded on first use, predictions (``rl.predict``), timing (``rl.bench``),
pictures (``rl.plots``), widgets, inspection (``rl.sass``, ``rl.occupancy``, ``rl.nsight``) and the
notebook magic. Nothing here touches a GPU until asked to; see ``python -m rmsnorm_lessons info``.

The package is built in wings, each importing only from the wings below it (``tests/
test_import_direction.py`` keeps it so; CONTRIBUTING.md draws them):

* ``core``: the math, the GPU, building and launching, the ladder of versions;
* ``inspection``: what the compiler and the profilers say (SASS, occupancy, Nsight, sanitizer);
* ``twin``: the course's CUDA run on the CPU, with a race detector;
* ``speed``: timing, the bench and its peers;
* ``course``: the lesson registry, notebook support, predictions, widgets, checking a learner's
  answer, the student edition;
* ``lessons``: one home per lesson (``rmsnorm_lessons.lessons.lesson04``): its checks, pictures and
  helpers;
* ``workshop``: progress across notebooks and a room's verdicts.

``cli`` (the command line) stands above them all.
"""
import importlib

#: the wings, lowest first: a module imports from its own wing and from lower tiers only (the
#: wings of one tier import neither each other nor anything above)
WINGS = (("core",), ("inspection", "twin"), ("speed",), ("course",), ("lessons",), ("workshop",))

from .core import bf16, build, compare, devices, gpu, ladder, launch, reference, validate
from .core.gpu import GpuUnavailable
from .core.run import forward, run

#: the modules the lessons name as ``rl.<name>``, each loaded from its wing on first use
#: (matplotlib, ipywidgets and torch load only when a lesson asks for them)
_HOMES = {
    "child": "core", "libcuda": "core", "project": "core",
    "access": "inspection", "nsight": "inspection", "occupancy": "inspection",
    "sanitizer": "inspection", "sass": "inspection",
    "bench": "speed", "peers": "speed", "timing": "speed",
    "notebook": "course", "plots": "course", "predict": "course", "profiles": "course",
    "registry": "course", "investigate": "course", "diagnose": "course", "saved": "course",
    "student": "course", "widgets": "course",
    "cli": "",
}

__all__ = ["bf16", "build", "compare", "devices", "gpu", "ladder", "launch", "reference",
           "validate", "GpuUnavailable", "forward", "run", *_HOMES]
__version__ = "0.1.0"


def __getattr__(name):
    if name in _HOMES:
        wing = _HOMES[name]
        return importlib.import_module(f".{wing}.{name}" if wing else f".{name}", __name__)
    raise AttributeError(f"module 'rmsnorm_lessons' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_HOMES))
