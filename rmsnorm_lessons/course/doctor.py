"""The environment doctor: what this machine has, and what a lesson can and cannot do here.

Every lesson's set-up cell (tools/setup_cell.py writes it) ends with ``print(doctor.report(stem))``:

    >>> from rmsnorm_lessons.course import doctor
    >>> print(doctor.report("13_finding_bugs"))     # doctest: +SKIP
    Lesson 13 (Finding bugs and bottlenecks) on this machine:
      GPU                NVIDIA H100 80GB HBM3, compute capability 9.0 (sm_90), driver 570.86.15 ...
      nvcc               13.0.88 (/usr/local/cuda/bin/nvcc)
      ncu                missing: the Nsight Compute cells show the profile saved on ...
      ...

One line a thing: the GPU, nvcc, then ncu, compute-sanitizer and nvdisasm; a missing one's line
says what this lesson does without it (what a lesson needs is its row's ``needs`` in the lesson
registry), or that the lesson does not use it. Nothing here raises: :func:`survey` turns every
failure to look (no driver, a tool that does not start) into the sentence it reports.
"""
from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from .registry import NEEDS  # what a lesson may need, in the order the report lists them

TOOLS = NEEDS[1:]
#: what a lesson that needs it does where it is missing (one sentence each)
WITHOUT = {
    "gpu": "the %%gpu cells show the output saved on {saved} instead of running, and {twin}",
    "nvcc": "nothing compiles here: the kernel exercises, resource reports and SASS cannot run "
            "(pip install \"nvidia-cuda-nvcc==13.0.*\" \"nvidia-cuda-crt==13.0.*\" "
            "\"nvidia-nvvm==13.0.*\" \"nvidia-cuda-cccl==13.0.*\" installs one)",
    "ncu": "the Nsight Compute cells show the profile saved on {saved} instead of one of yours "
           "(ncu comes with the CUDA toolkit or NVIDIA's Nsight Compute installer)",
    "compute-sanitizer": "your kernel's check runs without racecheck and synccheck, so a race can "
                         "pass, and a crash is reported without its line (it comes with the "
                         "CUDA toolkit)",
    "nvdisasm": "the SASS listings and the checks that read your kernel's SASS are skipped "
                "(pip install \"nvidia-cuda-nvdisasm>=13.0,<14\" installs it)",
}
#: what a kernel check does without a GPU, where the CPU twin runs (None) or not (its reason)
TWIN = {None: "your kernels run on the CPU twin (PASS on the CPU, or NOT YET; v7's as its "
                "register path alone)"}
NO_TWIN = "your kernels are compiled and inspected but not run (NOT VERIFIED: {why})"
_VERSION = re.compile(r"\bV(?:ersion\s+)?(\d+(?:\.\d+)+)")
_DRIVER = re.compile(r"Kernel Module(?:\s+for\s+\S+)?\s+(\d+\.\d+(?:\.\d+)?)")
WIDTH = 19  # the name column


@dataclass(frozen=True)
class Machine:
    """What :func:`survey` found. ``gpu`` describes the GPU (None where none works, and
    ``gpu_reason`` then says why); ``tools`` maps each of :data:`TOOLS` to its description
    (version and path) or None where it is missing."""

    gpu: str | None
    gpu_reason: str | None
    tools: dict = field(default_factory=dict)
    target: str | None = None  # the build target's line, where RMSNORM_ARCH is set
    twin: str | None = None  # why the CPU twin cannot run here (None: it can)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def driver_release(path: Path = Path("/proc/driver/nvidia/version")) -> str | None:
    """The NVIDIA kernel driver's release (``570.86.15``), read from ``path``; None where the
    file is missing or says no release."""
    try:
        m = _DRIVER.search(path.read_text(errors="replace"))
    except OSError:
        return None
    return m.group(1) if m else None


def tool_version(path: str, timeout: float = 30) -> str | None:
    """``<tool> --version``'s version number (``13.0.88``, ``2025.1.0.0``), or None where the tool
    does not say one (or does not start)."""
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True,
                             timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None
    found = _VERSION.findall(out.stdout + out.stderr)
    return found[-1] if found else None


def _describe_gpu() -> tuple[str | None, str | None]:
    from ..core import gpu

    reason = gpu.why_unavailable()
    release = driver_release()
    if reason is not None:
        driver = f" (NVIDIA driver {release} is installed)" if release else ""
        return None, reason.split(":")[0].rstrip(".") + driver  # its first clause: what is missing
    f = gpu.facts()
    major, minor = f.compute_capability
    d = f.driver_version
    release = f"{release} " if release else ""
    return (f"{f.name}, compute capability {major}.{minor} ({f.arch}), driver {release}"
            f"(CUDA {d // 1000}.{d % 1000 // 10})"), None


def _find(tool: str) -> str | None:
    if tool == "ncu":  # Nsight Compute's own installs too, where rl.nsight looks
        from ..inspection import nsight

        return nsight.find()
    from ..core import build

    return build.find_tool(tool)


def _describe_tool(tool: str) -> str | None:
    path = _find(tool)
    if path is None:
        return None
    version = tool_version(path)
    return f"{version} ({path})" if version else f"version not reported ({path})"


def _target() -> str | None:
    from ..core import devices

    if not os.environ.get(devices.ARCH_ENV):
        return None
    try:
        arch = devices.target_arch()
    except ValueError as exc:
        return f"not used: {_first_line(exc).split(': ', 1)[-1]}"
    return f"{arch} (${devices.ARCH_ENV}): every rung is built as PTX for it"


def survey() -> Machine:
    """Look at this machine: the GPU, the tools, the build target. Never raises: a failure to look
    becomes the line that reports it."""
    try:
        described, reason = _describe_gpu()
    except Exception as exc:  # noqa: BLE001 - the doctor reports, it does not fail
        described, reason = None, f"the GPU could not be queried ({_first_line(exc)})"
    tools = {}
    for tool in TOOLS:
        try:
            tools[tool] = _describe_tool(tool)
        except Exception as exc:  # noqa: BLE001
            tools[tool] = None if isinstance(exc, FileNotFoundError) else (
                f"could not be looked for ({_first_line(exc)})")
    try:
        target = _target()
    except Exception as exc:  # noqa: BLE001
        target = f"not read ({_first_line(exc)})"
    try:
        from .. import twin

        no_twin = twin.available()
    except Exception as exc:  # noqa: BLE001
        no_twin = f"it could not be looked for ({_first_line(exc)})"
    return Machine(described, reason, tools, target, no_twin)


def _saved(notebook_run: dict | None) -> str:
    if notebook_run and notebook_run.get("device"):
        date = notebook_run.get("date")
        return f"{notebook_run['device']}" + (f" ({date})" if date else "")
    return "the course's GPU"


def saved_run(row) -> dict | None:
    """The run the lesson's shipped outputs come from (``{"device": ..., "date": ...}``, which
    :mod:`rmsnorm_lessons.course.execute` records in the notebook), read from the instructor
    edition the package carries; None where it is not recorded or not readable."""
    import json

    from .notebook import RUN_KEY

    try:
        run = json.loads(row.path.read_text()).get("metadata", {}).get(RUN_KEY)
    except (OSError, ValueError, AttributeError):
        return None
    return run if isinstance(run, dict) else None


def report(lesson=None, machine: Machine | None = None, saved: dict | None = None) -> str:
    """The doctor's lines for ``lesson`` (a stem such as ``"02_naive"``, a registry row, or None
    for the whole course: every need) on ``machine`` (default: :func:`survey`). ``saved``: the
    run the lesson's outputs come from (``{"device": ..., "date": ...}``; default:
    :func:`saved_run`), which the lines for a missing GPU or ncu name."""
    from .registry import by_stem

    row = by_stem(lesson) if isinstance(lesson, str) else lesson
    if saved is None and row is not None:
        saved = saved_run(row)
    needs = tuple(row.needs) if row is not None else NEEDS
    unknown = [n for n in needs if n not in NEEDS]
    if unknown:
        raise ValueError(f"needs of {row.stem}: {unknown} are not among {list(NEEDS)}")
    m = machine if machine is not None else survey()
    where = _saved(saved)
    head = (f"Lesson {row.number} ({row.title}) on this machine:" if row is not None
            else "The course on this machine:")
    lines = [head]

    def line(name: str, text: str) -> None:
        lines.append(f"  {name:<{WIDTH}}{text}")

    missing = []
    if m.gpu is not None:
        line("GPU", m.gpu)
    else:
        missing.append("gpu")
        twin = TWIN.get(m.twin) or NO_TWIN.format(why=m.twin)
        line("GPU", f"none usable: {m.gpu_reason}" + _without("gpu", needs, where, twin))
    for tool in TOOLS:
        found = m.tools.get(tool)
        if found is not None and not found.startswith("could not"):
            line(tool, found)
            continue
        missing.append(tool)
        line(tool, (found or "missing") + _without(tool, needs, where))
    if m.target is not None:
        line("target", m.target)
    lacking = [n for n in missing if n in needs]
    if not lacking:
        lines.append("Everything in this lesson runs here." if row is not None
                     else "Everything in the course runs here.")
    return "\n".join(lines)


def _without(need: str, needs, saved: str, twin: str = "") -> str:
    if need not in needs:
        return ": this lesson does not use it"
    return ": " + WITHOUT[need].format(saved=saved, twin=twin)
