"""Lesson 13's questions (reading a profile by rl.nsight.reading's rule): each check passes the
right answer, says NOT YET to a plausible wrong one with a reason, and asks to replace None."""
import pytest

from rmsnorm_lessons.inspection import nsight
from rmsnorm_lessons.lessons import lesson13

CHOICES = [(lesson13.check_reading_first, "b", ("a", "c")),
           (lesson13.check_next_step, "b", ("a", "c"))]
NUMBERS = [(lesson13.check_dram_percent, 62.5, (0.625, 31.25, 6.25)),
           (lesson13.check_occupancy_cap, 37.5, (0.375, 75, 18.75))]
CHECKS = [c for c, _, _ in CHOICES + NUMBERS]


@pytest.mark.parametrize("check, right, wrongs", CHOICES + NUMBERS)
def test_right_passes_and_wrong_is_not_yet(check, right, wrongs):
    verdict = check(right)
    assert verdict.passed, verdict.message
    for wrong in wrongs:
        verdict = check(wrong)
        assert verdict.status == "NOT YET" and len(verdict.message) > 20, (wrong, verdict.message)
        # the reason, not the answer
        assert f"{right}" not in verdict.message.split() and f'"{right}"' not in verdict.message


@pytest.mark.parametrize("check", CHECKS)
def test_none_asks_to_replace_it(check):
    verdict = check(None)
    assert verdict.status == "NOT YET" and verdict.message.startswith("replace None")


def test_a_choice_is_read_whatever_its_case_and_a_fraction_asks_for_percent():
    assert lesson13.check_reading_first(" B ").passed
    assert "give one of" in lesson13.check_next_step("d").message
    assert "in %" in lesson13.check_dram_percent(0.625).message
    assert "in %" in lesson13.check_occupancy_cap(0.375).message


def test_the_choices_agree_with_the_packages_rule():
    # Q1's profile is memory-bound and Q3's reading is latency-bound by rl.nsight.reading
    q1 = nsight.Profile("x", "k", (1, 1), 82.0, 40.0, 1.0, {"long_scoreboard": 6.0, "wait": 4.0})
    assert nsight.reading(q1).startswith("memory-bound")
    q3 = nsight.Profile("x", "k", (1, 1), 30.0, 19.0, 1.0, {"long_scoreboard": 8.0, "wait": 2.0})
    assert nsight.reading(q3) == ("latency-bound: DRAM at 30 % of its peak, warps mostly waiting "
                                  "on long_scoreboard (global loads, 80 % of stalls) at 19 % "
                                  "achieved occupancy")
    # Q2's launch, 62.5 % of its peak, is on the memory-bound side of the line
    assert 62.5 >= nsight.MEMORY_BOUND_PCT
