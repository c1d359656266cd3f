"""The lessons' widgets (rmsnorm_lessons/course/widgets.py) without a GPU but for one test: the
access explorer and the check-and-time control of lessons 02 and 03, and the shared-memory summary
and explorer. Each builds and redraws; the control says in one line that nothing was launched."""
import pytest
from matplotlib.figure import Figure


def test_access_explorer_builds_and_redraws_without_a_gpu():
    from rmsnorm_lessons.course import widgets

    e = widgets.access_explorer("thread_per_row", N=32, C=64, block_size=256)
    assert isinstance(e.figure(), Figure)
    assert "<b>32</b>" in e.note.value
    e.layout.value = "warp_per_row"
    assert e.step.max == 1 and "<b>4</b>" in e.note.value
    e.C.value = 300
    e.step.value = 9
    e.layout.value = "thread_per_row"
    assert e.step.max == 299
    assert isinstance(e.figure(), Figure)


def test_check_and_time_builds_without_a_gpu():
    from rmsnorm_lessons.core import gpu
    from rmsnorm_lessons.course import widgets

    c = widgets.check_and_time(["v1_naive", "v2_warp"], N=64, C=32)
    assert c.version.value == "v1_naive"
    assert widgets.check_and_time(["v1_naive", "v2_warp"],
                                  version="v2_warp").version.value == "v2_warp"
    with pytest.raises(ValueError):
        widgets.check_and_time(["v1_naive", "v7_imaginary"])
    if gpu.why_unavailable() is not None:
        text = c.run()
        assert text.startswith("Nothing was launched") and text.count("\n") == 0
        c._clicked()  # the button's handler: prints that sentence into the control's output area


@pytest.mark.gpu
def test_check_and_time_runs_on_the_gpu():
    from rmsnorm_lessons.course import widgets

    c = widgets.check_and_time(["v2_warp"], N=257, C=96, repeats=3)
    text = c.run()
    assert "OK" in text and "GB/s" in text, text
    assert len(c.results) == 1


def test_shared_memory_summary():
    from rmsnorm_lessons.course import widgets

    text = widgets.shared_memory_summary("v3_smem", 16384)
    assert all(s in text for s in ("65536 B", "opts in", "3 block(s) fit", "second wave")), text
    text = widgets.shared_memory_summary("v3_smem", 1024)
    assert "within the 48 KiB" in text and "all of them run at once" in text
    assert "cannot launch" in widgets.shared_memory_summary("v6_last_block", 30000)
    assert "launch bounds" in widgets.shared_memory_summary("v6_last_block", 1024, block_size=1024)


def test_shared_memory_explorer_builds_and_redraws_without_a_gpu():
    from rmsnorm_lessons.course import widgets

    e = widgets.shared_memory_explorer("v6_last_block", C=8192)
    assert e.block_size.value == 512 and "80896 B" in e.summary()
    assert isinstance(e.figure(), Figure)
    e.version.value = "v3_smem"
    assert e.block_size.value == 256 and "v3_smem" in e.summary()
    e.C.value = 16384
    assert "second wave" in e.summary()
