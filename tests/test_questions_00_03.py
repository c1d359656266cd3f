"""The end-of-lesson questions of lessons 00-03 (CPU): the right answer passes, a plausible wrong
one says NOT YET with a reason, and None asks to be replaced."""
import pytest

from rmsnorm_lessons.lessons import lesson00, lesson01, lesson02, lesson03

# (check, arguments before the answer, right answer, a plausible wrong one, words of its reason)
CASES = [
    (lesson00.check_ridge, (19.5, 1555), 19.5e12 / 1555e9, 1555 / 19500, "bytes per FLOP"),
    (lesson00.check_ridge, (19.5, 1555), 12.54, 12540.0, "units"),
    (lesson00.check_more_flops, (), "b", "a", "roofline"),
    (lesson01.check_rstd_scaling, (), "b", "a", "inverse"),
    (lesson01.check_fd_passes, (3, 8), 64, 48, "weight"),
    (lesson01.check_fd_passes, (3, 8), 64, 32, "+h and -h"),
    (lesson02.check_idle_sms, (4096, 256, 132), 116, 16, "blocks"),
    (lesson02.check_idle_sms, (4096, 256, 132), 116, 0, "blocks"),
    (lesson02.check_coalesce_v1, (), "b", "a", "32 threads"),
    (lesson02.check_free_atomics, (), "b", "a", "two remain"),
    (lesson03.check_lane_columns, (1000, 31), 31, 32, "lane 0"),
    (lesson03.check_small_n, (), "b", "a", "count the blocks"),
]


@pytest.mark.parametrize("check,args,right,wrong,why", CASES,
                         ids=[f"{c[0].__module__[-8:]}.{c[0].__name__}-{i}"
                              for i, c in enumerate(CASES)])
def test_a_question_passes_the_right_answer_and_explains_a_wrong_one(check, args, right, wrong,
                                                                     why):
    assert check(*args, right), check(*args, right)
    verdict = check(*args, wrong)
    assert not verdict and verdict.status == "NOT YET"
    assert why in verdict.message, verdict.message
    assert "replace None" in check(*args, None).message


def test_a_choice_outside_the_options_is_asked_again():
    assert "one of" in lesson00.check_more_flops("d").message
    assert "one of" in lesson02.check_free_atomics("c").message
    assert "whole number" in lesson03.check_lane_columns(1000, 31, 30.5).message
