"""A new rung is its .cu, its ladder module and one line of ``ladder.RUNGS`` (CPU; one GPU test).

The test writes a throwaway rung, ``v8_copy`` (v3_smem's kernel under a new name), as the two files
a contributor would add, into temporary copies of ``kernels/`` and of the ladder's folder, and
appends its line to :data:`rmsnorm_lessons.core.ladder.RUNGS`; nothing else is told about it. The
plan, the checks of every argument, nvcc, the inspection tools and (on a GPU) ``run`` then take it
by name.
"""
import shutil
import sys

import numpy as np
import pytest

import rmsnorm_lessons as rl
from rmsnorm_lessons.core import build, compare, gpu, ladder, reference
from rmsnorm_lessons.course import registry
from rmsnorm_lessons.inspection import occupancy, sass

NAME = "v8_copy"
KERNEL = "rmsnorm_backward_v8"
MODULE = f'''"""{NAME}: v3_smem's kernel under another name (a test's throwaway rung)."""
from rmsnorm_lessons.core.ladder.rung import FP32, Launch, Rung, persistent_grid, standard_args


def shared_memory(C, block):
    return C * 4


def plan(N, C, device, *, block, overwrite=False, config=None):
    grid = persistent_grid(N, block, device.multiprocessors, 4)
    return [Launch("{KERNEL}", grid, block, shared_memory(C, block), standard_args(N, C))]


RUNG = Rung(name="{NAME}", adds="v3 again", dtype=FP32, c_multiple=1, deterministic=False,
            block_size=256, kernels=("{KERNEL}",), plan=plan, shared_memory=shared_memory)
'''


@pytest.fixture
def v8(tmp_path, monkeypatch):
    kernel_dir = tmp_path / "kernels"
    shutil.copytree(build.kernel_dir(), kernel_dir)
    text = build.kernel_source("v3_smem").replace("rmsnorm_backward_v3", KERNEL)
    assert KERNEL in text
    (kernel_dir / f"{NAME}.cu").write_text(text)
    ladder_dir = tmp_path / "ladder"
    ladder_dir.mkdir()
    (ladder_dir / f"{NAME}.py").write_text(MODULE)
    monkeypatch.setenv("RMSNORM_LESSONS_KERNELS", str(kernel_dir))
    monkeypatch.setenv("RMSNORM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(ladder, "__path__", [*ladder.__path__, str(ladder_dir)])
    monkeypatch.setattr(ladder, "RUNGS", [*ladder.RUNGS, NAME])  # the registry's one new line
    ladder.load_shipped()
    yield ladder.get(NAME)
    monkeypatch.undo()
    sys.modules.pop(f"{ladder.__name__}.{NAME}", None)
    if hasattr(ladder, NAME):
        delattr(ladder, NAME)
    ladder.load_shipped()
    assert NAME not in ladder.VERSIONS


def test_the_registry_line_puts_it_on_the_ladder(v8):
    assert v8.name == NAME and v8 in ladder.SHIPPED and ladder.SHIPPED[-1] is v8
    assert NAME in rl.ladder.VERSIONS
    # no lesson builds it (the lesson registry is where that would be said)
    assert registry.building(v8.name) is None
    with pytest.raises(ValueError, match="shipped rung"):
        ladder.unregister(NAME)


def test_plan_and_checks_take_it_by_name(v8):
    [launch] = ladder.plan(NAME, 8192, 1024)
    assert launch.kernel == KERNEL and launch.shared == 4096 and launch.block == 256
    assert ladder.shared_memory(NAME, 1000) == 4000
    p = reference.random_problem(37, 776, np.float32, seed=3)
    args = [p[k] for k in ("dout", "inp", "weight", "rstd", "dinp", "dweight")]
    assert rl.validate.inputs(NAME, *args).N == 37
    with pytest.raises(TypeError, match=f"must be native float32 for {NAME}"):
        rl.validate.inputs(NAME, p["dout"].astype(np.float64), *args[1:])
    with pytest.raises(ValueError, match=f"block_size for {NAME} must be a multiple of 32"):
        rl.run(NAME, *args, block_size=100)
    with pytest.raises(ValueError, match=f"{NAME} takes none"):
        rl.run(NAME, *args, config=ladder.v7_fast.Config())


def test_nvcc_and_the_inspection_tools_take_it_by_name(v8):
    compiled = build.compile_file(NAME, "sm_90")
    assert set(compiled.resources) == {KERNEL}
    assert build.resources(NAME, "sm_80")[KERNEL].registers > 0
    assert sass.resolve(NAME) is v8
    o = occupancy.occupancy(NAME, 1024, "sm_90")
    assert o.kernel == KERNEL and o.dynamic_smem == 4096
    assert NAME in occupancy.table([NAME])
    assert f"dynamic shared memory at C=1024: 4096 B" in occupancy.report(NAME, "sm_90", C=1024)


@pytest.mark.gpu
def test_it_runs_against_the_reference(v8):
    gpu.require()
    for N, C in ((129, 777), (8195, 1024)):
        p = reference.random_problem(N, C, np.float32, seed=N, accumulate=True)
        got = rl.run(NAME, p["dout"], p["inp"], p["weight"], p["rstd"], p["dinp"],
                          p["dweight"])
        ref = reference.backward(p["dout"], p["inp"], p["weight"], p["rstd"], p["dinp"],
                                 p["dweight"])
        report = compare.compare_outputs(v8, N, got, ref, name=NAME, C=C)
        assert report.ok, report
