"""The end-of-lesson questions of lessons 08 and 09 (CPU): the right answer passes, a plausible
wrong one gets a reason that does not give the answer away, None asks to be replaced."""
import pytest

from rmsnorm_lessons.lessons import lesson08, lesson09

CASES = [  # (check, right, [(plausible wrong, a word of its reason)], the None message's words)
    (lesson08.check_partial_floats, 264 * 1024,
     [(2 * 264 * 1024, "2 * C floats apart"), (263 * 1024, "its own"), (1024, "one block's")],
     "a number of floats"),
    (lesson08.check_second_wave, "a", [("b", "returns"), ("c", "read-modify-write")],
     '"a", "b", "c"'),
    (lesson09.check_in_flight_kib, 12, [(3, "several loads"), (48, "4 bytes"), (4, "every block")],
     "KiB per SM"),
]


@pytest.mark.parametrize("check, right, wrongs, missing", CASES,
                         ids=[c[0].__name__ for c in CASES])
def test_a_question_passes_the_answer_and_explains_a_wrong_one(check, right, wrongs, missing):
    verdict = check(right)
    assert verdict.passed and verdict.status == "PASS", verdict
    for wrong, why in wrongs:
        verdict = check(wrong)
        assert verdict.status == "NOT YET" and why in verdict.message, (wrong, verdict)
        if not isinstance(right, str):  # a number: not in the reason
            assert str(right) not in verdict.message.replace(str(wrong), ""), verdict
    verdict = check(None)
    assert verdict.status == "NOT YET" and "replace None" in verdict.message, verdict
    assert missing in verdict.message


def test_a_choice_question_lists_its_options_in_its_docstring():
    for check in (lesson08.check_second_wave,):
        assert all(f"\n    {o})" in check.__doc__ for o in "abc"), check.__name__
        assert check("d").status == "NOT YET"
