"""Who touches which byte (rmsnorm_lessons/inspection/access.py), which lessons 02-04 draw and count
from (CPU): the elements a warp touches follow the kernels' indexing, the sectors a warp's load
needs, the butterfly's values in every lane, and the shared-memory banks of a stride."""
import math

import numpy as np
import pytest

from rmsnorm_lessons.inspection import access


def test_touched_elements_follow_the_kernels_indexing():
    v1 = access.touched_elements("thread_per_row", N=40, C=64, step=5)
    assert v1 == [(t, t, 5) for t in range(40)]
    v2 = access.touched_elements("warp_per_row", N=2, C=40, step=1)  # columns 32..39 only
    assert v2 == [(w * 32 + lane, w, 32 + lane) for w in range(2) for lane in range(8)]
    assert access.touched_elements("thread_per_row", N=4, C=8, step=8) == []


@pytest.mark.parametrize("layout,C,step,sectors", [
    ("thread_per_row", 1024, 0, 32), ("thread_per_row", 4, 0, 16), ("thread_per_row", 8, 3, 32),
    ("warp_per_row", 1024, 0, 4), ("warp_per_row", 1024, 7, 4), ("warp_per_row", 300, 9, 2),
    ("warp_per_row", 8, 0, 1),
])
def test_warp_sectors(layout, C, step, sectors):
    assert access.warp_sectors(layout, C, step) == sectors


def test_butterfly_values_sum_in_every_lane():
    x = np.arange(32.0)
    steps = access.butterfly_values(x)
    assert steps.shape == (6, 32)
    assert np.all(steps[-1] == x.sum())
    four = access.butterfly_values(x, offsets=(16, 8, 4, 2))[-1]
    assert four[0] == sum(range(0, 32, 2)) and four[1] == sum(range(1, 32, 2))


def test_bank_layout_follows_the_word_index():
    rows, banks = access.bank_layout(33)
    assert rows[1] == 1 and banks[1] == 1 and len(set(banks.tolist())) == 32
    rows, banks = access.bank_layout(32)
    assert set(banks.tolist()) == {0} and rows.tolist() == list(range(32))
    for stride in (0, 1, 2, 3, 32, 33, 48, 64, 1024):
        assert access.bank_conflict_degree(stride) == (math.gcd(stride, 32) if stride else 1)
