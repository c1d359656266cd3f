"""Notebook runs (nbval): make the package importable inside the notebooks' kernels.

nbval starts each kernel with the notebook's folder as its working directory, so a relative entry in
PYTHONPATH (``PYTHONPATH=. pytest notebooks``) would point into ``notebooks/``. Make every entry absolute
and put the repository root first; with the package installed (``make test``) this changes nothing.
"""
import os
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parent.parent)
_parts = [str(Path(p).resolve()) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
os.environ["PYTHONPATH"] = os.pathsep.join([_ROOT] + [p for p in _parts if p != _ROOT])
