"""Re-execute lessons in place: ``python -m rmsnorm_lessons.course.execute notebooks/*.ipynb``.

Used on a GPU machine to refresh the outputs the notebooks ship with. A notebook that raises keeps
its old file, what it ran up to the error is written beside it as ``<name>.failed.ipynb`` (to read),
and the command exits non-zero.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path


def execute(path: Path, timeout: int = 900) -> float:
    import nbformat
    from nbclient import NotebookClient

    from ..core import gpu
    from .notebook import RUN_KEY

    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    try:
        client.execute()
    except Exception:
        nbformat.write(nb, failed_path(path))
        raise
    # where the outputs came from: %%gpu cells show them, labelled so, where no GPU is present
    device = gpu.facts().name if gpu.available() else "a machine without a GPU"
    nb.metadata[RUN_KEY] = {"device": device, "date": time.strftime("%Y-%m-%d")}
    nbformat.write(nb, path)
    return time.perf_counter() - start


def failed_path(path: Path) -> Path:
    return path.with_name(path.stem + ".failed.ipynb")


def main(argv=None) -> int:
    paths = [Path(p) for p in (argv if argv is not None else sys.argv[1:])]
    failed = 0
    for p in paths:
        try:
            seconds = execute(p)
            print(f"executed {p} in {seconds:.1f} s ({p.stat().st_size / 1024:.0f} KiB)")
        except Exception as exc:  # report and go on with the next lesson
            failed += 1
            print(f"FAILED {p}: {type(exc).__name__}: {str(exc)[-2000:]}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
