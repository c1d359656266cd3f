"""Lesson 00 (CPU): the question on the timing's buffer sets, rewritten to ask for a number
(issue 41): the right count passes, each likely wrong one says why; the grid and the bytes of scale
and scale4 (the exercises), a wrong count failing with a useful message."""
import numpy as np
import pytest

from rmsnorm_lessons.core import reference
from rmsnorm_lessons.lessons import lesson00
from rmsnorm_lessons.speed import timing

L2 = 50 * 2**20


def _set_bytes(N=1024, C=1024):
    p = reference.random_problem(N, C, np.float32, seed=0)
    return sum(p[name].nbytes for name in ("dout", "inp", "dinp", "rstd"))


def test_the_count_is_the_timings_own_rule():
    set_bytes = _set_bytes()
    assert set_bytes == 3 * 1024 * 1024 * 4 + 1024 * 4
    want = timing.sets_for(set_bytes, L2, 1 << 40)
    assert want == -(-3 * L2 // set_bytes) > timing.MIN_SETS  # three L2s decide here, not the least
    verdict = lesson00.check_rotate_sets(set_bytes, L2, want)
    assert verdict.passed and "three L2s" in verdict.message, verdict


@pytest.mark.parametrize("wrong,why", [
    (-(-L2 // _set_bytes()), "one L2's worth"),          # 5: one L2, not three
    (timing.MIN_SETS, "only when three L2s need fewer"),  # 8: the least, not the rule here
    (3 * L2 // _set_bytes(), "round up"),                # 12: rounded down
    (64, "how many sets"),
])
def test_each_likely_wrong_count_says_why(wrong, why):
    verdict = lesson00.check_rotate_sets(_set_bytes(), L2, wrong)
    assert verdict.status == "NOT YET" and why in verdict.message, verdict


def test_the_least_number_of_sets_passes_where_three_l2s_need_fewer():
    big = _set_bytes(4096, 4096)  # 64 MiB a set: three 50 MiB L2s fit in three sets
    assert lesson00.check_rotate_sets(big, L2, timing.MIN_SETS).passed
    assert "at least 8" in lesson00.check_rotate_sets(big, L2, timing.MIN_SETS).message


def test_placeholders_and_bad_input():
    assert "replace the ..." in lesson00.check_rotate_sets(_set_bytes(), L2, ...).message
    assert "whole number" in lesson00.check_rotate_sets(_set_bytes(), L2, 12.5).message
    with pytest.raises(ValueError, match="set_bytes and l2_bytes must be positive"):
        lesson00.check_rotate_sets(0, L2, 13)


# --- the grid and the bytes of scale and scale4 (the exercises) -----------------------------------


def test_lesson00_grid_and_bytes():
    assert lesson00.check_grid(1_000_003, 256, (1_000_003 + 255) // 256)
    assert lesson00.check_grid(1024, 256, 4)
    wrong = lesson00.check_grid(1_000_003, 256, 1_000_003 // 256)
    assert not wrong and "rounds down" in wrong.message
    assert not lesson00.check_grid(100, 8, 20)
    assert "replace the ..." in lesson00.check_grid(100, 8, ...).message
    assert lesson00.check_bytes(10, 80)
    assert "reads x and writes y" in lesson00.check_bytes(10, 40).message
    assert not lesson00.check_bytes(10, 120)


def test_lesson00_grid_with_several_elements_per_thread():
    n = 10_000_000
    assert lesson00.check_grid(n, 256, (n // 4 + 255) // 256, per_thread=4)
    per_float = lesson00.check_grid(n, 256, (n + 255) // 256, per_thread=4)
    assert not per_float and "each thread takes 4" in per_float.message
    rounded_down = lesson00.check_grid(n, 256, n // 4 // 256, per_thread=4)
    assert not rounded_down and "rounds down" in rounded_down.message
    with pytest.raises(ValueError, match="per_thread"):
        lesson00.check_grid(10, 256, 1, per_thread=4)


def test_lesson00_bytes_of_an_accumulating_kernel():
    assert lesson00.check_bytes(10, 120, accumulate=True)
    as_if_assigned = lesson00.check_bytes(10, 80, accumulate=True)
    assert not as_if_assigned and "reads y before it writes" in as_if_assigned.message
    assert not lesson00.check_bytes(10, 160, accumulate=True)
    assert not lesson00.check_bytes(10, 120)  # y[i] = a * x[i] does not read y
