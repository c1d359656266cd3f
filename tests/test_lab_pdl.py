"""The lab's PDL probe (lab/pdl_probe.py, lab/kernels/v7_pdl.cu) is ready for a GPU run: its ctypes
structs match cuda.h, its entry points build with the shipped kernels' registers and no spills, and
their SASS holds the two grid-dependency instructions (CPU, nvcc). On a GPU (sm_90): every spelling
agrees with float64 and bitwise with v7 as shipped. The lab is a record, not part of the course."""
import importlib
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from rmsnorm_lessons.core import build, gpu
from rmsnorm_lessons.core.ladder import v7_fast

LAB = Path(__file__).resolve().parent.parent / "lab"
needs_nvcc = pytest.mark.skipif(build.find_nvcc() is None, reason="nvcc is not installed")


@pytest.fixture(scope="module")
def probe():
    sys.path.insert(0, str(LAB))
    try:
        yield importlib.import_module("pdl_probe")
    finally:
        sys.path.remove(str(LAB))


@needs_nvcc
def test_the_ctypes_structs_match_cuda_h(probe):
    assert probe.ctypes_layout() == probe.header_layout()


def test_a_struct_that_drifted_would_be_seen(probe):
    """The comparison reads offsets, not only sizes: a field moved by a missing pad changes it."""
    import ctypes

    class Unpadded(ctypes.Structure):
        _fields_ = [("id", ctypes.c_int), ("value", ctypes.c_char * 64)]

    assert Unpadded.value.offset != probe.LaunchAttribute.value.offset


def sass_by_function(binary: bytes) -> dict[str, list[str]]:
    """Each function's opcodes in order (predicates dropped)."""
    tool = build.find_tool("cuobjdump")
    if tool is None:
        pytest.skip("cuobjdump is not installed")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(binary)
        f.flush()
        text = subprocess.run([tool, "-sass", f.name], capture_output=True, text=True,
                              check=True).stdout
    out, name = {}, None
    for line in text.splitlines():
        m = re.search(r"Function : (\S+)", line)
        if m:
            name = m.group(1)
            out[name] = []
        elif name and re.search(r"/\*[0-9a-f]{4}\*/", line):
            words = line.split("/*")[1].split("*/")[1].split(";")[0].split()
            words = words[1:] if words and words[0].startswith("@") else words  # a predicate
            if words:
                out[name].append(words[0])
    return out


@needs_nvcc
def test_the_pdl_entry_points_build_as_the_shipped_kernels_do(probe):
    compiled = build.compile_source(probe.source(), "sm_90", "cubin", name="v7_pdl",
                                    defines=v7_fast.DEFINES)
    res = compiled.resources
    sass = sass_by_function(compiled.binary)
    for shipped, pdl in probe.PDL_KERNELS.items():
        assert res[pdl].registers == res[shipped].registers, pdl
        assert not res[pdl].spills, pdl
        opcodes = sass[pdl]
        # griddepcontrol.launch_dependents and griddepcontrol.wait, once each, before any load
        assert opcodes.count("PREEXIT") == 1 and opcodes.count("ACQBULK") == 1, pdl
        first_load = next(i for i, op in enumerate(opcodes) if op.startswith(("LDG", "LDGSTS")))
        assert opcodes.index("ACQBULK") < first_load, pdl
        assert "PREEXIT" not in sass[shipped], shipped


@needs_nvcc
def test_below_sm_90_the_entry_points_are_the_shipped_kernels(probe):
    compiled = build.compile_source(probe.source(), "sm_80", "cubin", name="v7_pdl",
                                    defines=v7_fast.DEFINES)
    sass = sass_by_function(compiled.binary)
    for pdl in probe.PDL_KERNELS.values():
        assert not {"PREEXIT", "ACQBULK"} & set(sass[pdl]), pdl


def test_the_cluster_path_is_refused_not_launched(probe):
    plan = v7_fast.wide_plan(4, 32768, gpu.facts_or_fallback()[0])
    assert not probe.wrapped(plan)
    assert probe.wrapped(v7_fast.plan(4, 4096, gpu.facts_or_fallback()[0], block=512))


@pytest.mark.gpu
def test_every_spelling_is_the_shipped_result(probe):
    if tuple(gpu.facts().compute_capability) < (9, 0):
        pytest.skip("griddepcontrol needs sm_90")
    assert probe.check(((1031, 776), (257, 4104), (3, 16))) == 0


class FakeModule:
    """Stands in for pdl_probe.Module: records what each launch would pass to cuLaunchKernelEx."""

    def __init__(self):
        self.calls = []
        self.cu = type("Cu", (), {"check": staticmethod(lambda result, what: None)})()

    def function(self, name, dynamic_shared):
        import ctypes
        return ctypes.c_void_p(hash(name) & 0xFFFF)

    def launch_ex(self, config_ref, fn, params, extra):
        config = config_ref._obj
        self.calls.append((config.gridDimX, config.blockDimX, config.sharedMemBytes,
                           config.hStream, config.numAttrs,
                           config.attrs[0].id, config.attrs[0].value.as_int, fn.value, params))
        return 0


@pytest.mark.parametrize("C,path", [(776, "register"), (4104, "cp.async")])
@pytest.mark.parametrize("spelling,with_pdl", [("ctypes", (0, 0)), ("pdl", (0, 1)),
                                               ("pdl2", (1, 1))])
def test_a_prepared_call_launches_the_plan_as_planned(probe, spelling, with_pdl, C, path):
    import ctypes

    from rmsnorm_lessons.core import launch
    facts = gpu.facts_or_fallback()[0]
    plan = v7_fast.plan(1031, C, facts, block=512, overwrite=True)
    assert plan.path == path
    tensors = launch.Tensors(dinp=11, dweight=12, dout=13, inp=14, weight=15, rstd=16)
    stream = type("Stream", (), {"handle": 0x5151})()
    module = FakeModule()
    call = probe.Prepared(module, plan, tensors, partials=99, stream=stream, spelling=spelling)
    call()
    assert len(module.calls) == 2
    for step, got, pdl in zip(plan, module.calls, with_pdl):
        grid, block, shared, handle, attrs, attr_id, attr_on, fn, params = got
        assert (grid, block, shared, handle) == (step.grid, step.block, step.shared, 0x5151)
        assert attrs == pdl and attr_id == 6 and attr_on == 1
        name = step.kernel if spelling == "ctypes" else probe.PDL_KERNELS[step.kernel]
        assert fn == hash(name) & 0xFFFF
        # each parameter points at its value: tensors by name, the scratch, then the ints
        want = [getattr(tensors, v.name) if isinstance(v, probe.Tensor) else
                99 if isinstance(v, probe.Scratch) else v for _, v in step.args]
        seen = []
        for k, (_, v) in enumerate(step.args):
            kind = ctypes.c_int if isinstance(v, int) else ctypes.c_uint64
            seen.append(ctypes.cast(params[k], ctypes.POINTER(kind)).contents.value)
        assert seen == want
