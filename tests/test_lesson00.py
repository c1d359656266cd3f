"""Lesson 00 (CPU): the question on the timing's buffer sets, rewritten to ask for a number
(issue 41): the right count passes, each likely wrong one says why."""
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
