"""MANIFEST.json for a results folder: which command made which file, on which commit, device and driver.

Every folder under results/ carries one. The lab's scripts call :func:`record` when they write a
result; a shell command (the package's bench CLI, Nsight Compute, a log captured with ``>``) is recorded
from the command line:

    python lab/manifest.py DIR FILE [FILE ...] -- COMMAND [ARG ...]

    e.g. (cd results/<name> && python -m rmsnorm_lessons bench --json bench.json --plot bench.png)
         python lab/manifest.py results/<name> bench.json bench.png -- \\
             python -m rmsnorm_lessons bench --json bench.json --plot bench.png

FILE is a name in DIR or a path (made relative to DIR).

The manifest is ``{"name": folder name, "runs": [run, ...]}``; a run is ``{"command", "produced" (file
names in the folder), "commit", "dirty", "device", "compute_capability", "driver", "cuda", "nvcc",
"packages", "date"}``. A file belongs to one run: recording it again moves it to the new run (a run left
with no files is dropped). Where git is absent (a copy of the tree on a GPU machine) the commit is read
from the environment variable ``LAB_COMMIT`` (``dirty`` is then unknown: null).
"""
from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NAME = "MANIFEST.json"
#: packages whose versions a run records where they are installed (the peers' and the toolchain's)
PACKAGES = ("numpy", "pycuda", "torch", "triton", "liger-kernel", "quack-kernels", "nvidia-cutlass-dsl")


def _git(*args) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout if out.returncode == 0 else None


def commit() -> tuple[str | None, bool | None]:
    """(HEAD's hash, whether tracked files differ from it); from ``LAB_COMMIT`` (dirty unknown) without git."""
    head = _git("rev-parse", "HEAD")
    if head is None:
        return os.environ.get("LAB_COMMIT") or None, None
    status = _git("status", "--porcelain", "--untracked-files=no")
    return head.strip(), None if status is None else bool(status.strip())


def _nvidia_driver() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = out.stdout.strip().splitlines()
    return lines[0].strip() if out.returncode == 0 and lines else None


def machine() -> dict:
    """The device (rmsnorm_lessons.core.gpu.facts), the NVIDIA driver, the CUDA version it supports, nvcc, packages."""
    from rmsnorm_lessons.core import build, gpu

    facts = gpu.facts() if gpu.available() else None
    cuda = None
    if facts is not None:
        d = facts.driver_version
        cuda = f"{d // 1000}.{d % 1000 // 10}"
    packages = {}
    for name in PACKAGES:
        try:
            packages[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return dict(device=facts.name if facts else None,
                compute_capability=".".join(map(str, facts.compute_capability)) if facts else None,
                driver=_nvidia_driver(), cuda=cuda, nvcc=build.nvcc_version(), packages=packages)


def load(folder) -> dict:
    path = Path(folder) / NAME
    if path.exists():
        return json.loads(path.read_text())
    return {"name": Path(folder).resolve().name, "runs": []}


def save(path, data) -> Path:
    """Write ``data`` as JSON to ``path`` and record the run that made it in its folder's MANIFEST.json:
    what every script's ``--json`` does."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n")
    record(path.parent, [path])
    print(f"wrote {path}")
    return path


def record(folder, produced, command=None) -> Path:
    """Add a run that wrote ``produced`` (paths, or names in ``folder``) to ``folder``/MANIFEST.json.

    ``command``: the command line (a list or a string); default ``python`` + ``sys.argv``.
    Returns the manifest's path.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    # a bare name is a file in the folder; a path is made relative to the folder
    names = [str(p) if len(Path(p).parts) == 1 else os.path.relpath(p, folder) for p in produced]
    if command is None:
        command = ["python", *sys.argv]
    if not isinstance(command, str):
        command = shlex.join(str(c) for c in command)
    head, dirty = commit()
    run = dict(command=command, produced=names, commit=head, dirty=dirty, **machine(),
               date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))
    manifest = load(folder)
    runs = []
    for old in manifest.get("runs", []):
        old = dict(old, produced=[f for f in old.get("produced", []) if f not in names])
        if old["produced"]:
            runs.append(old)
    manifest["runs"] = runs + [run]
    path = folder / NAME
    path.write_text(json.dumps(manifest, indent=1) + "\n")
    return path


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "-h" in argv[:1] or "--help" in argv[:1] or "--" not in argv:
        print(__doc__)
        return 0 if argv[:1] in (["-h"], ["--help"]) else 2
    cut = argv.index("--")
    files, command = argv[:cut], argv[cut + 1:]
    if len(files) < 2 or not command:
        print("usage: python lab/manifest.py DIR FILE [FILE ...] -- COMMAND [ARG ...]", file=sys.stderr)
        return 2
    print(f"wrote {record(files[0], files[1:], command)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
