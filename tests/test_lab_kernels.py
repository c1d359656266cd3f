"""The lab's v8 and v9 experiments still build (CPU, nvcc): they include the frozen copy of v7 in
lab/kernels/frozen/, not the live kernels/v7_fast.cu, so a change to the course's kernel cannot
break them unseen. The lab is a record, not part of the course: this only checks it stays
buildable."""
import importlib
import sys
from pathlib import Path

import pytest

from rmsnorm_lessons.core import build, ladder

LAB = Path(__file__).resolve().parent.parent / "lab"
EXPERIMENTS = [("v8_tma", "v8"), ("v9_async", "v9"), ("v9_async", "v9w_b1024")]

needs_nvcc = pytest.mark.skipif(build.find_nvcc() is None, reason="nvcc is not installed")


@pytest.fixture(scope="module")
def lab_modules():
    sys.path.insert(0, str(LAB))
    try:
        yield {name: importlib.import_module(name)
               for name in ("v8_tma", "v9_async", "variant_runs")}
    finally:
        sys.path.remove(str(LAB))


def test_the_lab_kernels_include_only_the_frozen_v7(lab_modules):
    for name in ("v8_tma.cu", "v9_async.cu"):
        text = (LAB / "kernels" / name).read_text()
        assert '#include "frozen/v7_fast.cu"' in text, name
        source = lab_modules["variant_runs"].kernel_source(name)
        includes = [line for line in source.splitlines() if line.lstrip().startswith("#include")]
        assert includes == ["#include <cuda_bf16.h>"], (name, includes)


@needs_nvcc
@pytest.mark.parametrize("module,variant", EXPERIMENTS)
def test_a_lab_variant_builds_for_sm_90(lab_modules, module, variant):
    rung = lab_modules[module].register(variant)
    try:
        resources = build.compile_file(rung, "sm_90").resources
        missing = [k for k in rung.kernels if k not in resources]
        assert not missing, f"{variant}: kernels the build did not produce: {missing}"
        assert not any(resources[k].spills for k in rung.kernels), variant
    finally:
        ladder.unregister(rung.name)
