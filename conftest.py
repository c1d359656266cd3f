"""GPU tests (marker ``gpu``) and notebook cells tagged ``gpu`` run only where a CUDA device works."""
import pytest

from rmsnorm_lessons import gpu


def pytest_collection_modifyitems(config, items):
    reason = gpu.why_unavailable()
    if reason is None:
        return
    skip_test = pytest.mark.skip(reason=f"needs a GPU: {reason}")
    skip_cell = pytest.mark.skip(reason="notebook cell tagged gpu: no GPU here")
    for item in items:
        cell = getattr(item, "cell", None)
        if cell is not None:
            if "gpu" in cell.get("metadata", {}).get("tags", []):
                item.add_marker(skip_cell)
        elif "gpu" in item.keywords:
            item.add_marker(skip_test)


def pytest_terminal_summary(terminalreporter):
    reason = gpu.why_unavailable()
    if reason is not None:
        terminalreporter.write_line(f"GPU tests and gpu-tagged notebook cells were skipped: {reason}")
