"""The end-of-lesson questions of lessons 10-12 (CPU): the right answer passes, a plausible wrong
one is NOT YET with a reason, and the placeholder asks to be replaced."""
import pytest

from rmsnorm_lessons.lessons import lesson10, lesson11, lesson12

CASES = [
    # check, right, plausible wrong answers (with a word of the reason given)
    (lesson10.check_group_size, 192, [(768, "chunks"), (1536, "chunks of 8"), (100, "multiple")]),
    (lesson10.check_idle_slots, 56, [(200, "row's chunks"), (28, "both"), (7, "G x K")]),
    (lesson11.check_tail_rows, 136, [(4, "row groups"), (128, "idle"), (15, "full rounds")]),
    (lesson11.check_in_flight_bytes, 65536, [(32768, "both tensors"), (98304, "dinp"),
                                             (4096, "chunk is 16 bytes")]),
    (lesson11.check_more_sms, "c", [("b", "each block"), ("a", "C partials")]),
    (lesson11.check_reduce_rows, 9, [(132, "every partial row"), (8, "round up"),
                                     (16, "warps of a block"), (3, "round-robin")]),
    (lesson12.check_rank_chunks, 1280, [(10240, "channels"), (5120, "whole row"),
                                        (640, "shared among")]),
]


@pytest.mark.parametrize("check, right, wrongs", CASES,
                         ids=lambda x: getattr(x, "__name__", ""))
def test_question(check, right, wrongs):
    v = check(right)
    assert v.passed and v.status == "PASS", v.message
    for wrong, says in wrongs:
        v = check(wrong)
        assert v.status == "NOT YET" and says in v.message, (wrong, v.message)
    v = check(None)
    assert v.status == "NOT YET" and "replace None" in v.message
