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
    (lesson12.check_cluster_wait, "a", [("b", "several SMs"), ("c", "running")]),
    (lesson12.check_staged_wait, "b", [("a", "asynchronous"), ("c", "who reads")]),
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


def test_choices_take_any_case_and_refuse_other_letters():
    assert lesson11.check_more_sms(" C ").passed
    v = lesson12.check_cluster_wait("d")
    assert not v.passed and 'give one of "a", "b", "c"' in v.message


def test_reduce_rows_follow_the_plan(monkeypatch):
    import dataclasses

    from rmsnorm_lessons.core import gpu

    # 132 partial rows on the H200's 132 SMs, 16 warps a block of the final sum: 9 for warp 0
    assert lesson11.reduce_rows(device=gpu.H200) == (9, 132, 16)
    small = dataclasses.replace(gpu.H200, multiprocessors=66)
    assert lesson11.reduce_rows(device=small) == (5, 66, 16)
    assert lesson11.check_reduce_rows(5, device=small).passed
    assert not lesson11.check_reduce_rows(9, device=small).passed


def test_tail_rows_follows_the_plan():
    # 264 row groups on the H200 at C = 4096 (accumulate: 2 groups a block, 132 blocks)
    assert lesson11.tail_rows(4096, 4096) == 4096 - 15 * 264
    assert lesson11.tail_rows(264 * 3, 4096) == 264
