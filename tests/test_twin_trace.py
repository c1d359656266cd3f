"""The CPU twin's record of every access to chosen buffers (``trace=``), and the coalescing check
built on it (rmsnorm_lessons.course.checking.coalescing): a warp's k-th access of a tensor is
judged by the 32-byte sectors its lanes touch together, exactly and the same with or without a
GPU. The walk-through of 2026-12 found lesson 03's v2 check passing a v2 whose lanes each read a
block of columns (32 sectors a load where 4 do); these tests keep that caught."""
import numpy as np
import pytest

from rmsnorm_lessons import twin
from rmsnorm_lessons.core import build, ladder, reference
from rmsnorm_lessons.course.checking import coalescing
from rmsnorm_lessons.twin import execute

pytestmark = pytest.mark.skipif(twin.available() is not None, reason=str(twin.available()))

STRIDED = "for (int c = lane; c < C; c += WARP_SIZE)"
BLOCKED = ("for (int c = lane * ((C + 31) / 32); c < min(C, (lane + 1) * ((C + 31) / 32)); "
           "c++)")


def _trace(rows):
    """A trace of (block, thread, kind, bytes, offset) rows of buffer 0, launch 0."""
    out = np.zeros(len(rows), execute.TRACE_DTYPE)
    for i, (block, thread, kind, size, offset) in enumerate(rows):
        out[i] = (0, block, thread, 0, kind, size, offset)
    return out


def test_v2s_trace_holds_every_access_in_each_threads_order():
    N, C = 16, 256
    p = reference.random_problem(N, C, np.float32, seed=0, accumulate=True)
    ran = twin.run_rung("v2_warp", p["dout"], p["inp"], p["weight"], p["rstd"], p["dinp"],
                        p["dweight"], calls=1, trace=("inp", "dinp"))
    assert ran.hazards == [] and ran.trace_dropped == 0
    t = ran.trace
    inp, dinp = t[t["buffer"] == 0], t[t["buffer"] == 1]
    assert len(inp) == 2 * N * C and set(inp["kind"]) == {coalescing.READ}  # two loops over it
    assert (dinp["kind"] == coalescing.READ).sum() == (dinp["kind"] == coalescing.WRITE).sum() \
        == N * C
    lane0 = inp[(inp["block"] == 0) & (inp["thread"] == 0)]["offset"]  # row 0, lane 0
    assert lane0.tolist() == [4 * c for c in range(0, C, 32)] * 2
    assert coalescing.worst_step(t, 0, coalescing.READ) is None


def test_steps_count_sectors_against_the_fewest_the_bytes_fill():
    def one_step(offsets, size=4):
        [step] = coalescing.steps(_trace([(0, lane, 1, size, o) for lane, o in
                                          enumerate(offsets)]), 0, 1)
        return step.sectors, step.fewest

    assert one_step([4 * lane for lane in range(32)]) == (4, 4)  # 32 neighbouring floats
    assert one_step([16 * lane for lane in range(32)], size=16) == (16, 16)  # a float4 a lane
    assert one_step([0] * 32) == (1, 1)  # every lane the same float: a broadcast
    assert one_step([8 * lane for lane in range(32)]) == (8, 4)  # every other float
    assert one_step([4 * 8 * lane for lane in range(32)]) == (32, 4)  # a block of 8 each


def test_a_warps_steps_line_up_lane_by_lane_whatever_the_order_they_ran_in():
    rows = [(0, lane, 1, 4, 4 * (lane + 32 * k)) for lane in range(32) for k in range(3)]
    steps = list(coalescing.steps(_trace(rows[::-1]), 0, 1))  # lane 31's last access first
    assert [s.step for s in steps] == [0, 1, 2]
    assert all(s.sectors == s.fewest == 4 and s.lanes == tuple(range(32)) for s in steps)


def test_a_trace_names_buffers_of_the_program_and_needs_the_hooks():
    library = twin.build_rung("v2_warp")
    buf = execute.Buffer("inp", 16, 4, (bytes(16),))
    with pytest.raises(ValueError, match="trace must name distinct buffers"):
        execute.run_program(library, [buf], [], trace=("dout",))
    bare = twin.build_rung("v2_warp", hazards=False)
    with pytest.raises(ValueError, match="hazards=True"):
        execute.run_program(bare, [buf], [], trace=("inp",))


def _v2(text):
    return ladder.rung_from_source(name="blocked_v2_test", source=text, like="v2_warp")


def test_a_v2_whose_lanes_each_take_a_block_of_columns_is_not_coalesced():
    ours = build.kernel_source("v2_warp")
    assert coalescing.check("v2_warp")[0] is True
    for loops in (1, 2):  # the first loop alone: right numbers, uncoalesced loads
        ok, why = coalescing.check(_v2(ours.replace(STRIDED, BLOCKED, loops)),
                                   kernel_name="yours_v2")
        assert ok is False, why
        assert "32 sectors" in why and "fit in 4" in why and "lane 1 column 8" in why, why
