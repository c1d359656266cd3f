"""The end-of-lesson questions of lessons 05 (bf16) and 06 (v4): each check says PASS to the right
answer, NOT YET with a reason to a plausible wrong one, and asks to replace None (CPU)."""
import numpy as np
import pytest

from rmsnorm_lessons.core import bf16
from rmsnorm_lessons.lessons import lesson05, lesson06


def _stalled_sum(start=0.0, add=1.0, times=1000):
    total = bf16.to_bf16(np.float32(start))
    for _ in range(times):
        total = bf16.to_bf16(np.float32(bf16.from_bf16(total)) + np.float32(add))
    return float(bf16.from_bf16(total))


def test_the_stalled_sum_is_what_ml_dtypes_rounds_to():
    assert lesson05.check_sum_stalls(_stalled_sum()).passed


@pytest.mark.parametrize("check, right, wrong, says", [
    (lesson05.check_sum_stalls, 256, 1000, "exact sum"),
    (lesson05.check_sum_stalls, 256.0, 257, "tie"),
    (lesson05.check_error_growth, 10, 100, "one sign"),
    (lesson05.check_error_growth, 100 ** 0.5, 1, "does grow"),
    (lesson05.check_range, "b", "a", "largest finite"),
    (lesson05.check_range, " B ", "c", "exponent bits"),
    (lesson06.check_planar_slot, 770, 19, "interleaved"),
    (lesson06.check_planar_slot, 770, 2 * 256 + 3, "swapped"),
    (lesson06.check_four_wide_conflict, 4, 8, "v4's case"),
    (lesson06.check_four_wide_conflict, 4.0, 1, "stride"),
    (lesson06.check_streaming_load, "b", "a", "never changes"),
    (lesson06.check_streaming_load, "b", "c", "width"),
])
def test_right_passes_and_a_plausible_wrong_one_says_why(check, right, wrong, says):
    assert check(right).passed, check(right).message
    verdict = check(wrong)
    assert verdict.status == "NOT YET" and says in verdict.message, verdict.message
    assert str(right).strip().lower() not in verdict.message.split(), verdict.message


@pytest.mark.parametrize("check", [lesson05.check_sum_stalls, lesson05.check_error_growth,
                                   lesson05.check_range, lesson06.check_planar_slot,
                                   lesson06.check_four_wide_conflict,
                                   lesson06.check_streaming_load])
def test_none_asks_to_replace_it(check):
    verdict = check(None)
    assert verdict.status == "NOT YET" and "replace None" in verdict.message, verdict.message


def test_the_planar_slot_is_the_rungs_staged():
    from rmsnorm_lessons.core.ladder import v4_vec_bf16  # mirrors the kernel's staged()

    for c, C in [(19, 2048), (7, 16), (1023, 1024)]:
        assert lesson06.check_planar_slot(int(v4_vec_bf16.staged(c, C)), c=c, C=C).passed
