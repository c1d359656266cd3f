"""An ablation (a version timed with one statement of its kernel removed) and the bound read from it
(lesson 03 measures what bounds v2 this way, rather than stating it)."""
import pytest

from rmsnorm_lessons.core import build, gpu, ladder
from rmsnorm_lessons.speed import bench
from rmsnorm_lessons.speed.timing import Timing

ATOMIC = "atomicAdd(&dweight[c], norm * dout_row[c]);"


def timing(ms, fraction_of_copy, copy=4000.0):
    nbytes = fraction_of_copy * copy * 1e9 * ms * 1e-3
    return Timing("t", 8192, 1024, ms, 0.01, int(nbytes), nbytes / (ms * 1e-3) / 1e9, copy)


@pytest.mark.parametrize("rest_ms,rest_copy,bound", [
    (0.10, 0.9, "atomics"),   # taking them out halves the time or more: they bound it
    (0.12, 0.3, "atomics"),
    (0.15, 0.8, "memory"),    # they cost less than half, and the rest streams
    (0.15, 0.3, "latency"),   # they cost less than half, and the rest does not stream
])
def test_the_bound_read_from_an_ablation(rest_ms, rest_copy, bound):
    whole = timing(0.24, 0.135)
    assert bench.bound_after_ablation(whole, timing(rest_ms, rest_copy), "atomics") == bound


@pytest.mark.parametrize("remove", ["dout_row[c]", "no such statement;", None])
def test_an_ablation_removes_exactly_one_statement(remove):
    with pytest.raises(ValueError, match=r"remove must be a statement found exactly once"):
        bench.ablation("v2_warp", remove, 8192, 1024, 4000.0)


def test_the_ablated_kernel_builds_without_its_atomic():
    text = build.kernel_source("v2_warp")
    assert text.count(ATOMIC) == 1
    rest = ladder.rung_from_source(name="v2_warp_ablated", like="v2_warp", register_it=False,
                                   source=text.replace(ATOMIC, ""))
    assert any(op.startswith(("RED", "ATOM")) for op in _opcodes("v2_warp"))
    assert not any(op.startswith(("RED", "ATOM")) for op in _opcodes(rest))
    assert "v2_warp_ablated" not in ladder.VERSIONS


def _opcodes(rung):
    import re

    from rmsnorm_lessons.inspection import sass
    try:
        listing = sass.sass(rung, "sm_90")
    except sass.ToolMissing:
        pytest.skip("no SASS disassembler here")
    return re.findall(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9.]*)", listing)


@pytest.mark.gpu
def test_an_ablation_is_timed():
    copy = gpu.copy_bandwidth()
    rest = bench.ablation("v2_warp", ATOMIC, 1024, 1024, copy, repeats=3)
    assert rest.name == f"v2_warp without {ATOMIC}" and rest.ms > 0
