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


def test_choices_take_any_case_and_refuse_other_letters():
    assert lesson11.check_more_sms(" C ").passed
    v = lesson11.check_more_sms("d")
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


def test_lesson12_follows_the_facts_of_the_gpu():
    import dataclasses

    from rmsnorm_lessons.core import gpu

    assert lesson12.clusters_waiting(device=gpu.H200) == (3, 33, 30)
    assert lesson12.check_waiting_clusters(3, device=gpu.H200).passed
    for wrong, says in [(0, "not SMs / 4"), (33, "fills the GPU"), (30, "first round"),
                        (5, "minus"), (None, "replace None")]:
        v = lesson12.check_waiting_clusters(wrong, device=gpu.H200)
        assert v.status == "NOT YET" and says in v.message, (wrong, v.message)
    other = dataclasses.replace(gpu.H200, multiprocessors=114, resident_clusters=((2, 57), (4, 28)))
    assert lesson12.clusters_waiting(device=other) == (1, 29, 28)
    assert lesson12.check_waiting_clusters(1, device=other).passed
    a100 = dataclasses.replace(gpu.H200, compute_capability=(8, 0), resident_clusters=())
    with pytest.raises(ValueError, match="runs no clusters of 4"):
        lesson12.clusters_waiting(device=a100)
    assert lesson12.check_waiting_clusters(3, device=a100).passed  # the H200's, said so


def test_the_staged_ring():
    assert lesson12.staged_ring()[:2] == (49152, 2)
    v = lesson12.check_staged_ring(49152, 2)
    assert v.passed and "49,152 bytes" in v.message, v
    for ring, rows, says in [(196608, 2, "block's rings"), (24576, 2, "one tensor"),
                             (73728, 2, "does not read dinp"), (16384, 2, "one row slot"),
                             (98304, 2, "2 bytes"), (49152, 3, "being worked on"),
                             (49152, 1, "every slot but"), (None, 2, "replace None"),
                             (49152, None, "replace None"), (7, 9, "less the one")]:
        v = lesson12.check_staged_ring(ring, rows)
        assert v.status == "NOT YET" and says in v.message, (ring, rows, v.message)


def test_tail_rows_follows_the_plan():
    # 264 row groups on the H200 at C = 4096 (accumulate: 2 groups a block, 132 blocks)
    assert lesson11.tail_rows(4096, 4096) == 4096 - 15 * 264
    assert lesson11.tail_rows(264 * 3, 4096) == 264
