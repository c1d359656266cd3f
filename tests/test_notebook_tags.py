"""Strict nbval: every code cell whose output depends on the machine carries nbval-ignore-output
(tools/tag_notebooks.py adds it; the rules live there), the sanitize file parses, and no CPU cell of
lessons 04-08 uses a name only a cell tagged gpu (skipped without one) defines."""
import ast
import configparser
import importlib.util
import json
import re
from pathlib import Path

import pytest
from _lesson_support import nb_cells as _cells

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("tag_notebooks", ROOT / "tools" / "tag_notebooks.py")
tag_notebooks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tag_notebooks)
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_machine_dependent_cells_are_tagged(path):
    missing = tag_notebooks.untagged(json.loads(path.read_text(encoding="utf-8")))
    assert not missing, "\n".join(f"{path.name} code cell {n}: {'; '.join(why)}" for n,
                                  why in missing) + \
        "\nrun python3 tools/tag_notebooks.py"


def _cell(source, text, tags=()):
    return {"cell_type": "code", "metadata": {"tags": list(tags)}, "source": source,
            "outputs": [{"output_type": "stream", "name": "stdout", "text": text}]}


@pytest.mark.parametrize("source, text", [
    ("print(f'{t:.3f} ms')", "v7_fast: 0.213 ms\n"),
    ("print(rate)", "copy 4217 GB/s\n"),
    ("print(rl.notebook.setup())", "GPU: NVIDIA H200 (sm_90, 132 SMs)\n"),
    ("print(path)", "/work/main/.venv/lib/python3.11/site-packages/x\n"),
    ("rl.widgets.check_and_time(['v1_naive'])", "Pick a version\n"),
    # PASS on a GPU, NOT VERIFIED without one: nothing in the text names the machine
    ("lesson03.check_warp_sum(my_body)",
     "PASS: nvcc compiled it for sm_90 (14 registers) and ran it\n"),
    ("lesson08.check_v6_kernel(yours_v6)",
     "PASS: yours_v6 matches the float64 reference at 4 shapes\n"),
])
def test_an_untagged_machine_dependent_cell_is_caught(source, text):
    nb = {"cells": [_cell("x = 1", "1\n"), _cell(source, text)]}
    assert [n for n, _ in tag_notebooks.untagged(nb)] == [1]
    nb["cells"][1]["metadata"]["tags"].append("nbval-ignore-output")
    assert tag_notebooks.untagged(nb) == []


def test_reveal_and_versus_cells_need_the_tag_and_prediction_cells_do_not():
    reveal = _cell("rl.notebook.compare_with_ours(verdict, 'v1_naive')", "Ours stays hidden\n",
                   tags=["reveal"])
    versus = _cell("rl.predict.versus(mine, ms=t.ms)", "02.v1_ms: your guess beside\n")
    guess = _cell("mine = rl.predict.guess('02.v1_ms', ms=0.8)",
                  "Prediction 02.v1_ms: 0.8 ms. The measurement below shows it\n",
                  tags=["prediction"])
    nb = {"cells": [reveal, versus, guess]}
    assert [n for n, _ in tag_notebooks.untagged(nb)] == [0, 1]
    guess["metadata"]["tags"] = []  # untagged, its "0.8 ms" reads as a timing
    assert [n for n, _ in tag_notebooks.untagged(nb)] == [0, 1, 2]


@pytest.mark.parametrize("tag, source", [
    ("opening", "before = lesson04.opening()"),
    ("diagnosis", "lesson04.check_diagnosis(before, bound=..., cause=..., metric=..., value=...)"),
    ("what-changed", "after = lesson04.opening(after=True)\nrl.investigate.what_changed(before, "
                     "after)"),
])
def test_an_investigations_cells_need_the_tag(tag, source):
    tagged = _cell(source, "v2_warp at 8192x1024, saved on NVIDIA H100 80GB HBM3\n", tags=[tag])
    untagged_by_name = _cell(source, "")
    nb = {"cells": [tagged, untagged_by_name]}
    assert [n for n, _ in tag_notebooks.untagged(nb)] == [0, 1]
    assert tag_notebooks.TAG_RULES[tag] in tag_notebooks.reasons(tagged)


def test_a_deterministic_cell_needs_no_tag():
    nb = {"cells": [_cell("print(rl.build.kernel_source('v1_naive'))",
                          "// v1_naive.cu\n__global__ ...\n"),
                    _cell("print(2 + 2)", "4\n")]}
    assert tag_notebooks.untagged(nb) == []


def test_sanitize_file_parses_and_normalises():
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "nbval_sanitize.cfg")
    assert cfg.sections()
    rules = [(re.compile(cfg[s]["regex"]), cfg[s]["replace"]) for s in cfg.sections()]

    def clean(text):
        for rx, rep in rules:
            text = rx.sub(rep, text)
        return text

    assert clean("v7 took 0.213 ms at 4217 GB/s") == clean("v7 took 0.198 ms at 4302 GB/s")
    assert clean("at 0x7f3a12bc4d50") == clean("at 0x7f00deadbeef")
    assert clean("mask 0xffffffff") == "mask 0xffffffff"  # a 32-bit mask is not an address


# --- no CPU cell of lessons 04-08 needs a name only a gpu cell defines (skipped without a GPU) ----


NOTEBOOKS_04_08 = ["04_shared_memory.ipynb", "05_bf16.ipynb", "06_vectorized.ipynb",
             "07_two_pass.ipynb",
             "08_last_block.ipynb"]


def _names(source):
    """(names stored, names loaded) by a cell, its IPython magics left out."""
    code = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith("%"))
    stored, loaded = set(), set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Name):
            (stored if isinstance(node.ctx, ast.Store) else loaded).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            stored.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            stored.update((a.asname or a.name).split(".")[0] for a in node.names)
    return stored, loaded


@pytest.mark.parametrize("name", NOTEBOOKS_04_08)
def test_no_cpu_cell_depends_on_a_gpu_cell(name):
    defined_by_cpu, defined_only_by_gpu = set(), set()
    for cell in _cells(name):
        if cell.cell_type != "code":
            continue
        stored, loaded = _names(cell.source)
        if "gpu" in cell.metadata.get("tags", []):
            defined_only_by_gpu |= stored - defined_by_cpu
            continue
        needs = (loaded - stored) & defined_only_by_gpu
        assert not needs, (f"a CPU cell of {name} uses {sorted(needs)}, defined only in a gpu "
                           f"cell:\n{cell.source}")
        defined_by_cpu |= stored
        defined_only_by_gpu -= stored
