"""The lessons as they ship: light, and carrying the outputs of a real GPU run with no error in them."""
import json
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))


def _cells(path):
    return json.loads(path.read_text())["cells"]


def test_every_lesson_is_here():
    names = [p.stem for p in NOTEBOOKS]
    assert names == ["00_setup", "01_rmsnorm_math", "02_naive", "03_warp_per_row", "04_shared_memory",
                     "05_bf16_vectorized", "06_two_pass", "07_last_block", "08_speed_of_light"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_lesson_is_well_under_a_megabyte(path):
    assert path.stat().st_size < 600 * 1024


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_gpu_cells_are_marked_and_ran(path):
    gpu_cells = [c for c in _cells(path) if "gpu" in c.get("metadata", {}).get("tags", [])]
    assert gpu_cells, "a lesson without a single kernel launch"
    for cell in gpu_cells:
        source = "".join(cell["source"])
        assert source.startswith("%%gpu"), source[:60]
        text = json.dumps(cell.get("outputs", []))
        # shipped with the outputs of a GPU run: executed, not skipped for want of a device
        assert cell.get("execution_count") is not None, source[:60]
        assert "Skipped (this cell launches kernels)" not in text, source[:60]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_cell_shipped_with_an_error(path):
    for cell in _cells(path):
        for out in cell.get("outputs", []):
            assert out.get("output_type") != "error", "".join(cell["source"])[:80]
            assert "Traceback (most recent call last)" not in "".join(out.get("text", [])), "".join(cell["source"])[:80]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_lesson_has_the_course_shape(path):
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    cells = nb.cells
    assert cells[0].cell_type == "markdown" and "What you will be able to do" in cells[0].source
    first_code = next(c for c in cells if c.cell_type == "code")
    assert "rl.notebook.setup()" in first_code.source and "%matplotlib inline" in first_code.source
    assert "What to take away" in cells[-1].source
    for cell in cells:
        if cell.cell_type == "code":
            assert ("gpu" in cell.metadata.get("tags", [])) == cell.source.startswith("%%gpu"), cell.source[:80]
    # an exercise whose check is called in the lesson
    assert any("lesson0" in c.source and "check" in c.source for c in cells if c.cell_type == "code")
