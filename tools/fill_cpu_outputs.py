"""Give a lesson's new CPU cells their outputs without touching the GPU cells' saved ones.

    python tools/fill_cpu_outputs.py notebooks/<lesson>.ipynb [more ...] [--cells 3,7]

Runs a copy of each notebook top to bottom here (``%%gpu`` cells only say there is no GPU), then
copies into the notebook the outputs of its code cells that are not tagged ``gpu`` and have no
outputs yet (a cell added or moved without them), plus the code cells named by ``--cells`` (indices
among all cells, e.g. one whose source changed). Everything else keeps the outputs of the H200 run.
A notebook whose copy raises is left as it was. The GPU cells of a changed lesson still need the
H200 (tools/refresh-on-gpu.sh).
"""
from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path


def fill(path: Path, extra: set[int]) -> list[int]:
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    run = copy.deepcopy(nb)
    NotebookClient(run, timeout=900, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    filled = []
    for i, (cell, fresh) in enumerate(zip(nb.cells, run.cells)):
        if cell.cell_type != "code":
            continue
        new = not cell.get("outputs") and "gpu" not in cell.metadata.get("tags", [])
        if new or i in extra:
            cell.outputs = fresh.outputs
            cell.execution_count = fresh.execution_count
            filled.append(i)
    nbformat.write(nb, path)
    return filled


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("notebooks", nargs="+", type=Path)
    ap.add_argument("--cells", default="", help="comma-separated cell indices to refresh as well")
    args = ap.parse_args(argv)
    extra = {int(x) for x in args.cells.split(",") if x.strip()}
    status = 0
    for path in args.notebooks:
        try:
            print(f"{path}: outputs filled in cells {fill(path, extra)}")
        except Exception as exc:  # report, leave the notebook as it was, go on
            status = 1
            print(f"{path}: FAILED, left unchanged: {type(exc).__name__}: {str(exc)[-1500:]}",
                  file=sys.stderr)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
