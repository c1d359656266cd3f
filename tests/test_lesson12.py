"""Lesson 12 (v7 on Hopper: clusters and the staged ring), on the CPU: its questions follow the
facts of the GPU (the clusters of 4 that wait for a second round) and the ring's bytes and rows,
each wrong answer with its reason."""
import pytest

from rmsnorm_lessons.lessons import lesson12


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
