"""Setting a Colab runtime up for the course: what a lesson's set-up cell calls once the course is
installed there.

The set-up cell (tools/setup_cell.py writes it) detects Colab as Colab itself does (the
``COLAB_RELEASE_TAG`` environment variable, or ``google.colab`` imported), installs the course at
the revision the notebook was written for when it is missing, then calls :func:`complete`, which
installs what else the lessons use where the runtime lacks it:

* PyCUDA, where an NVIDIA driver is present (a GPU runtime; it builds against the runtime's CUDA);
* NVIDIA's nvcc wheels (CUDA 13.0) where no nvcc is found, and the nvdisasm wheel where no
  nvdisasm is (the course's wheel depends on it, so this is for an older install);
* ipywidgets 8, and Colab's manager for custom widgets.

Each step prints one line; a step that fails says so in one line (pip's last words) and the rest
go on: the doctor the cell prints next says what is still missing. Running it again installs
nothing new.
"""
from __future__ import annotations

import ctypes
import importlib
import json
import os
import subprocess
import sys

DISTRIBUTION = "rmsnorm-lessons"
#: the variable a test (or a fork) sets to install the course from elsewhere: a clone's folder, a
#: wheel, another git URL
SOURCE_ENV = "RMSNORM_LESSONS_SOURCE"
#: NVIDIA's CUDA 13.0 compiler wheels (what tools/setup-venv.sh installs where no nvcc is found)
NVCC_WHEELS = ("nvidia-cuda-nvcc==13.0.*", "nvidia-cuda-crt==13.0.*", "nvidia-nvvm==13.0.*",
               "nvidia-cuda-runtime==13.0.*", "nvidia-cuda-cccl==13.0.*")
NVDISASM_WHEEL = "nvidia-cuda-nvdisasm>=13.0,<14"
PYCUDA = "pycuda>=2024.1"
IPYWIDGETS = "ipywidgets>=8"


def in_colab(environ=None, modules=None) -> bool:
    """Whether this is a Colab runtime: ``COLAB_RELEASE_TAG`` set, or ``google.colab`` imported."""
    environ = os.environ if environ is None else environ
    modules = sys.modules if modules is None else modules
    return bool(environ.get("COLAB_RELEASE_TAG")) or "google.colab" in modules


def installed_revision() -> str | None:
    """The commit the installed course came from, where pip installed it from git (its
    ``direct_url.json``); None for a wheel, a folder or a package index."""
    from importlib import metadata

    try:
        text = metadata.distribution(DISTRIBUTION).read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        return None
    try:
        return json.loads(text or "{}").get("vcs_info", {}).get("commit_id")
    except ValueError:
        return None


def _has_driver() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


def _importable(module: str) -> bool:
    importlib.invalidate_caches()
    try:
        importlib.import_module(module)
        return True
    except Exception:  # noqa: BLE001 - a broken install is as good as none
        return False


def _version(distribution: str) -> tuple[int, ...] | None:
    from importlib import metadata

    try:
        text = metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None
    return tuple(int(p) for p in text.split(".")[:2] if p.isdigit())


def pip(*args: str, runner=subprocess.run) -> str | None:
    """``python -m pip install -q <args>`` in this kernel's Python: None where it worked, else
    pip's last line."""
    done = runner([sys.executable, "-m", "pip", "install", "-q", *args], capture_output=True,
                  text=True)
    if done.returncode == 0:
        importlib.invalidate_caches()
        return None
    words = (done.stderr or done.stdout or "").strip().splitlines()
    return words[-1] if words else f"pip exited with {done.returncode}"


def plan(*, has_driver: bool, has_pycuda: bool, has_nvcc: bool, has_nvdisasm: bool,
         widgets: tuple[int, ...] | None) -> list[tuple[str, tuple[str, ...]]]:
    """What :func:`complete` installs, given what the runtime has: ``[(why, pip arguments)]``."""
    steps = []
    if has_driver and not has_pycuda:
        steps.append(("PyCUDA, to launch kernels (built against this runtime's CUDA: a minute "
                      "or two)", (PYCUDA,)))
    if not has_nvcc:
        steps.append(("nvcc from NVIDIA's CUDA 13.0 wheels (none is installed here)",
                      NVCC_WHEELS))
    if not has_nvdisasm:
        steps.append(("nvdisasm from NVIDIA's wheel, for the SASS listings and checks",
                      (NVDISASM_WHEEL,)))
    if widgets is None or widgets < (8,):
        steps.append(("ipywidgets 8, for the lessons' widgets", (IPYWIDGETS,)))
    return steps


def complete(revision: str | None = None, source: str | None = None, *, runner=subprocess.run,
             say=print) -> list[str]:
    """Install what the lessons use and this runtime lacks (:func:`plan`); one line each. Where
    the installed course is from another commit than ``revision`` (a git install, from a notebook
    of another revision), reinstall it from ``source`` and say that the runtime must restart.
    Returns the lines said."""
    from ..core import build

    said: list[str] = []

    def tell(text: str) -> None:
        said.append(text)
        say(text)

    have = installed_revision()
    if revision and source and have and have != revision:
        tell(f"The course installed here is revision {have[:12]}; this notebook is "
             f"{revision[:12]}: reinstalling it.")
        failed = pip("--force-reinstall", "--no-deps", source, runner=runner)
        tell(f"Could not reinstall the course: {failed}" if failed else
             "Reinstalled: restart the runtime (Runtime > Restart session), then run this cell "
             "again.")
    steps = plan(has_driver=_has_driver(), has_pycuda=_importable("pycuda"),
                 has_nvcc=build.find_nvcc() is not None,
                 has_nvdisasm=build.find_tool("nvdisasm") is not None,
                 widgets=_version("ipywidgets"))
    if not _has_driver():
        tell("No NVIDIA driver in this runtime (Runtime > Change runtime type > a GPU): PyCUDA "
             "is not installed, and the %%gpu cells show their saved output.")
    for why, args in steps:
        tell(f"Installing {why} ...")
        failed = pip(*args, runner=runner)
        if failed:
            tell(f"  could not install {' '.join(args)}: {failed}")
    try:
        from google.colab import output  # only on Colab

        output.enable_custom_widget_manager()
    except Exception:  # noqa: BLE001 - outside Colab, or a Colab without it: widgets stay static
        pass
    if not steps:
        tell("Colab: everything the course uses is installed.")
    return said
