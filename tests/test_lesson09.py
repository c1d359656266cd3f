"""Lesson 09 (bytes in flight): the floor time, Little's law, the pointer chase's chain and the
kernels of kernels/bytes_in_flight.cu as the lesson describes them (CPU: nvcc and the SASS, no
launch); on a GPU the latency and the scale variants are measured (marker ``gpu``). The kernel
exercise is tested with the others in tests/test_kernel_exercises.py; here, that its GPU run
happens in the check's child process alone."""
from __future__ import annotations

import numpy as np
import pytest

from rmsnorm_lessons.core import build, gpu
from rmsnorm_lessons.lessons import lesson09
from rmsnorm_lessons.lessons.lesson09 import inflight

needs_sass = pytest.mark.skipif(build.find_tool("nvdisasm") is None, reason="no nvdisasm")


def test_littles_law():
    # 2 TB/s of loads at 500 ns: 1 MB outstanding
    assert inflight.needed_in_flight(2000, 500) == pytest.approx(1e6)
    # y = a * x reads half of what it moves; 132 SMs with 8 KiB each at 800 ns read 1.35 TB/s,
    # moving 2.7
    assert inflight.predicted_fraction(8192, 132, 800,
                                       4000) == pytest.approx(2 * 132 * 8192 / 800 / 4000)
    assert inflight.predicted_fraction(10**6, 132, 800, 4000) == 1.0  # never above the copy line
    assert inflight.in_flight_per_sm("scale_f128_x4", 2048) == 2048 * 16 * 4
    assert inflight.in_flight_per_sm("scale_f32_x1", 2048) == 8192
    with pytest.raises(ValueError, match="variant must be one of"):
        inflight.in_flight_per_sm("scale_f64", 2048)


#: lesson 09's scale table and chase as the H100 measured them (2026-12-05, the run of
#: /work/shared/runs/h100-2026-12-05): (variant, blocks per SM, KiB per SM, ms)
H100_TABLE = [("scale_f32_x1", 1, 1, 0.861), ("scale_f32_x1", 2, 2, 0.474),
              ("scale_f32_x1", 4, 4, 0.285), ("scale_f32_x1", 8, 8, 0.225),
              ("scale_f32_x4", 1, 4, 0.343), ("scale_f32_x4", 2, 8, 0.242),
              ("scale_f32_x4", 4, 16, 0.200), ("scale_f32_x4", 8, 32, 0.202),
              ("scale_f128_x1", 1, 4, 0.314), ("scale_f128_x1", 2, 8, 0.223),
              ("scale_f128_x1", 4, 16, 0.190), ("scale_f128_x1", 8, 32, 0.193),
              ("scale_f128_x4", 1, 16, 0.203), ("scale_f128_x4", 2, 32, 0.194),
              ("scale_f128_x4", 4, 64, 0.192), ("scale_f128_x4", 8, 128, 0.194),
              ("scale_f32_x1", None, 8, 0.233)]


def h100_run(table=H100_TABLE, source="saved on NVIDIA H100 80GB HBM3, 2026-12-05"):
    copy, moved = 2997.0, 2 * 64 * 2**20 * 4
    points = tuple(inflight.ScaleTiming(v, b, 256 * b if b else 2048, kib * 1024, ms,
                                        moved / (ms * 1e-3) / 1e9, copy)
                   for v, b, kib, ms in table)
    return inflight.Run(copy, 132, inflight.Chase(22.0, 139.0, 337.0), points, source)


def test_the_decision_reads_littles_law_and_the_flat_part_of_the_table():
    run = h100_run()
    need = 1498.5e9 * 337e-9 / 132
    assert lesson09.in_flight_for_copy(2997, 337, 132) == pytest.approx(need)
    flat = lesson09.flat_row(run)
    # fastest 0.190 ms; within 3 %: 0.190 .. 0.1957 ms, the fewest KiB among them is 16
    assert (flat.variant, flat.blocks_per_sm, flat.in_flight_per_sm) == ("scale_f128_x1", 4, 16384)
    v = lesson09.check_in_flight(need, 16, run=run)
    assert v.passed, v
    for words in ("3.7 KiB per SM", "flattens at 16 KiB", "scale_f128_x1 at 4 block(s) per SM",
                  "4.3 times", "saved on NVIDIA H100 80GB HBM3, 2026-12-05"):
        assert words in v.message, (words, v.message)
    for need_got, flat_got, says in [
            (None, 16, "replace None"), (need, None, "replace None"),
            (2 * need, 16, "copy / 2"), (need * 132, 16, "divide by the SMs"),
            (need / 1024, 16, "that is KiB"), (need * 139 / 337, 16, "L2's latency"),
            (need * 1.5, 16, "off by +50 %"),
            (need, 16384, "KiB (1024 bytes), not bytes"),
            (need, 3.7, "Little's law with the latency of a load alone"),
            (need, 32, "so is a row with fewer KiB"),
            (need, 8, "longer than the fastest row"),
            (need, 12, "no row of the table has 12 KiB")]:
        v = lesson09.check_in_flight(need_got, flat_got, run=run)
        assert v.status == "NOT YET" and says in v.message, (need_got, flat_got, v.message)
    # both wrong: both named, and where the figures come from
    v = lesson09.check_in_flight(2 * need, 32, run=run)
    assert "need_per_sm" in v.message and "flat_kib" in v.message and "H100" in v.message, v
    # another GPU's table: its own flat part
    faster = [(vr, b, kib, ms * (0.9 if (vr, b) == ("scale_f128_x4", 2) else 1.0))
              for vr, b, kib, ms in H100_TABLE]
    assert lesson09.check_in_flight(need, 32, run=h100_run(faster)).passed


def test_question_two_takes_the_chase_of_the_run():
    run = h100_run()
    right = 1e12 * 337e-9 / 4
    v = lesson09.check_threads_for_bandwidth(right, run=run)
    assert v.passed and "84,250 threads" in v.message and "H100" in v.message, v
    for wrong, says in [(None, "replace None"), (right * 1e3, "powers of ten"),
                        (right * 4, "bytes in flight"), (right / 132, "whole GPU"),
                        (1e12 * 139e-9 / 4, "L2's latency"), (right * 2, "Little's law")]:
        v = lesson09.check_threads_for_bandwidth(wrong, run=run)
        assert v.status == "NOT YET" and says in v.message, (wrong, v.message)


def test_a_run_is_kept_from_this_process_and_round_trips(monkeypatch, tmp_path):
    from types import SimpleNamespace

    from rmsnorm_lessons.course import saved

    run = h100_run()
    again = inflight.Run.from_dict(run.as_dict(), run.source)
    assert again == run
    assert run.point("scale_f32_x1", None).ms == 0.233
    with pytest.raises(LookupError, match="scale_f128_x4 at 3 block"):
        run.point("scale_f128_x4", 3)
    # what this process measured wins over the saved run, and is saved where the GPU run asks
    monkeypatch.setattr(inflight, "_MEASURED", {})
    assert inflight.this_run() is None
    monkeypatch.setattr(gpu, "facts", lambda: SimpleNamespace(name="NVIDIA X", multiprocessors=132))
    inflight._MEASURED["chase"] = run.chase
    inflight._MEASURED["points"] = {(p.variant, p.blocks_per_sm): p for p in run.points}
    monkeypatch.setattr(inflight, "saved_path",  # the course's saved run: h100-2026-12-20 here
                        lambda name=None: tmp_path / (name or "h100-2026-12-20") / "l.json")
    monkeypatch.setattr(saved, "save_run", lambda: None)
    here = lesson09.measured()
    assert here.source == "measured now on NVIDIA X" and here.points == run.points
    assert not list(tmp_path.iterdir())  # RMSNORM_SAVE_RUN not set: nothing written
    monkeypatch.setattr(saved, "save_run", lambda: "h100-2026-12-20")
    lesson09.measured()
    back = inflight.saved_run("h100-2026-12-20")
    assert back.points == run.points and back.chase == run.chase
    assert back.source.startswith("saved on NVIDIA X, 20")
    # nothing measured here: the saved run, with its label
    monkeypatch.setattr(inflight, "_MEASURED", {})
    assert lesson09.measured().source == back.source


def test_the_saved_run_is_the_h100s_of_2026_12_05():
    """results/h100-2026-12-05/lesson09.json: the chase and the scale table as that run printed
    them (cells 10 and 19 of lesson 09), which the lesson's decision reads without a GPU."""
    run = inflight.saved_run("h100-2026-12-05")
    assert run.source == "saved on NVIDIA H100 80GB HBM3, 2026-12-05"
    assert run.as_dict() == h100_run().as_dict() | {"points": run.as_dict()["points"]}
    assert [(p.variant, p.blocks_per_sm, p.in_flight_per_sm // 1024, p.ms) for p in run.points] \
        == H100_TABLE
    assert lesson09.check_in_flight(1498.5e9 * 337e-9 / 132, 16, run=run).passed


def test_the_decisions_picture():
    run = h100_run()
    fig = lesson09.in_flight_marked(run)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "Little's law, unloaded: 3.7 KiB" in labels and "the table flattens: 16 KiB" in labels
    with pytest.raises(ValueError, match="marks"):
        lesson09.bytes_in_flight(run.points, marks={"none": 0})


def test_chase_chain_is_one_cycle_through_every_node():
    stride, nodes = 128, 1000
    chain = inflight.chase_chain(nodes * stride, stride, seed=3)
    assert chain.dtype == np.uint32 and chain.size == nodes * stride // 4
    j, seen = 0, []
    for _ in range(nodes):
        seen.append(j)
        j = int(chain[j])
    # every node once, back at 0
    assert j == 0 and sorted(seen) == [k * stride // 4 for k in range(nodes)]
    steps = np.diff(seen)
    assert np.mean(np.abs(steps) == stride // 4) < 0.05  # random: hardly ever the next line
    with pytest.raises(ValueError):
        inflight.chase_chain(100, 6)


@needs_sass
def test_the_kernels_load_as_the_lesson_says():
    """Width and loads before the first store, read from the SASS (what lesson 09's SASS cell
    prints)."""
    from rmsnorm_lessons.inspection import sass

    listing = sass.listing(inflight.KERNEL_FILE)
    for variant, (width, loads) in inflight.VARIANTS.items():
        ins = listing.functions[variant].instructions
        ops = [i.opcode for i in ins if i.opcode.startswith(("LDG", "STG"))]
        assert all(o.endswith(".128") == (width == 16) for o in ops), (variant, ops)
        first_store = next(k for k, o in enumerate(ops) if o.startswith("STG"))
        assert first_store == loads, (variant, ops)
    chase = [i.opcode for i in listing.functions["pointer_chase"].instructions
             if i.opcode.startswith("LDG")]
    assert chase and all("STRONG.GPU" in o for o in chase)  # __ldcg: L2, not L1
    l1 = [i.opcode for i in listing.functions["pointer_chase_l1"].instructions
          if i.opcode.startswith("LDG")]
    assert l1 and all(o.endswith("STRONG.SM") for o in l1)  # __ldca: the SM (its L1) answers


@pytest.mark.gpu
def test_latency_and_scale_on_the_gpu():
    # Other processes' kernels on the same GPU evict the L2 chain (seen under 16 test workers on an
    # H100: L2 384 ns, DRAM 347 ns; alone 141 and 339): the order is asked of one of three readings
    readings = []
    for _ in range(3):
        levels = inflight.chase()
        readings.append(levels)
        if 1 < levels.l1_ns < levels.l2_ns < levels.dram_ns < 5000:
            break
    else:
        pytest.fail(f"no reading in the order L1 < L2 < DRAM: {readings}")
    copy = gpu.copy_bandwidth()
    slow = inflight.time_scale("scale_f32_x1", copy)
    fast = inflight.time_scale("scale_f128_x4", copy, blocks_per_sm=8)
    assert fast.gbps > slow.gbps and fast.in_flight_per_sm == 16 * slow.in_flight_per_sm


def test_bytes_in_flight_plot():
    from matplotlib.figure import Figure


    points = [dict(variant=v, in_flight_per_sm=inflight.in_flight_per_sm(v, b * 256),
                   gbps=1000.0 * b, copy_gbps=4000.0)
              for v in inflight.VARIANTS for b in (1, 2, 4, 8)]
    fig = lesson09.bytes_in_flight(points, latency_ns=700, sms=132)
    assert isinstance(fig, Figure)
    ax = fig.axes[0]
    # a line per variant, Little's law, the copy line
    assert len(ax.get_lines()) == len(inflight.VARIANTS) + 2
    assert "Little's law, 700 ns" in [t.get_text() for t in ax.get_legend().get_texts()]
    with pytest.raises(ValueError):
        lesson09.bytes_in_flight([])


@pytest.mark.parametrize("source, part, first, last", [
    ("bytes_in_flight", "pointer_chase", "// __ldcg: cached in L2 only", "}"),
    ("bytes_in_flight", "scale_loop", "// T: float (4-byte loads)", "}"),
    ("v7_fast", "Place", "// Where a thread works.", "};"),
    ("v7_fast", "row_pass", "// Pass 1 over the registers", "}"),
    ("v7_fast", "rmsnorm_backward_v7", "// One entry point;", "}"),
])
def test_a_part_of_a_kernel_file_is_its_definition_alone(source, part, first, last):
    text = lesson09.kernel_part(source, part)
    lines = text.splitlines()
    assert lines[0].startswith(first) and lines[-1] == last, text
    assert text in build.kernel_source(source)
    # one definition: exactly as many braces close as open
    assert text.count("{") == text.count("}")
    assert f"{part}(" in text or f"struct {part}" in text


def test_a_part_is_a_definition_not_a_call():
    # row_pass is called inside backward: the part named is the definition, not the call's line
    text = lesson09.kernel_part("v7_fast", "backward")
    assert "row_pass<K, WEIGHT_IN_REGISTERS>(p, weight4" in text
    assert "float dot = 0.0f;" not in text  # row_pass's own body


def test_an_unknown_part_is_refused_naming_the_parts():
    with pytest.raises(ValueError, match=r"'nope' is not a function .* pointer_chase, "
                                         r"pointer_chase_l1, times, scale_loop$"):
        lesson09.kernel_part("bytes_in_flight", "nope")


# --- the kernel exercise's GPU run: in the check's child process only


def test_the_scale_check_hands_its_run_to_the_child_and_never_runs_it_here(monkeypatch):
    from types import SimpleNamespace

    from test_kernel_exercises import kernel_text

    from rmsnorm_lessons.core import child
    from rmsnorm_lessons.course.checking import child as kernel_child
    from rmsnorm_lessons.course.checking.running import Outcome

    if build.find_nvcc() is None:
        pytest.skip("nvcc not found")
    monkeypatch.setattr(gpu, "why_unavailable", lambda: None)  # as if a GPU worked
    monkeypatch.setattr(gpu, "facts", lambda: SimpleNamespace(arch="sm_90"))
    ran_here = []
    monkeypatch.setattr(lesson09.exercise, "_run_scale", lambda function_of: ran_here.append(1))
    handed = []

    def in_child(name, source, run, **kwargs):
        handed.append((name, source, run))
        return kernel_child.ChildRun(Outcome(False, "your kernel crashed the check's child "
                                                    "process: SIGSEGV.", ("error",)),
                                     True, None, child.Finished(-11, "", ""))

    monkeypatch.setattr(kernel_child, "run_plain_in_child", in_child)
    text = kernel_text("09_bytes_in_flight")
    verdict = lesson09.check_scale_kernel(text)
    assert verdict.status == "NOT YET" and "crashed the check's child" in verdict.message, verdict
    assert "restart" not in verdict.message
    assert ran_here == [] and [h[:2] for h in handed] == [("yours_scale", text)]
    handed[0][2](SimpleNamespace(get_function=None))  # the run handed over is _run_scale's
    assert ran_here == [1]


def test_a_failed_launch_in_the_scale_run_says_what_failed_and_no_restart(monkeypatch):
    class Buffer:
        def free(self):
            pass

    monkeypatch.setattr(gpu, "driver", lambda: type("Driver", (), {
        "to_device": staticmethod(lambda a: Buffer())})())

    def scale_wide(*args, **kwargs):
        raise RuntimeError("cuLaunchKernel failed: an illegal memory access was encountered")

    outcome = lesson09.exercise._run_scale(lambda name: scale_wide)
    assert not outcome.ok and outcome.kinds == ("error",)
    assert outcome.message.startswith(f"at n4 = {lesson09.CHECK_SIZES[0]} running it failed: "
                                      "RuntimeError: cuLaunchKernel failed"), outcome.message
    assert "restart" not in outcome.message


@pytest.mark.skipif(gpu.available(), reason="the saved opening: a GPU measures its own")
def test_the_diagnosis_of_the_saved_opening():
    before = lesson09.opening()
    value = before.figure("stall:long_scoreboard")
    verdict = lesson09.check_diagnosis("latency", "few_loads_in_flight", "stall:long_scoreboard",
                                       value)
    assert verdict.status == "PASS" and "v7_fast" in verdict.message, verdict
    assert lesson09.check_diagnosis("memory", "few_loads_in_flight", "stall:long_scoreboard",
                                    value).status == "NOT YET"
    assert "replace None" in lesson09.check_diagnosis().message


# --- round 2 (walk-through 03-10): scale_wide's chunks judged by their owners -------------------

def _scale_solution() -> str:
    from _mutation_sources import solution_text

    from rmsnorm_lessons.course import registry

    return solution_text(registry.by_stem("09_bytes_in_flight"))


BLOCKED = "const int i = (blockIdx.x * blockDim.x + threadIdx.x) * UNROLL + k;"


@pytest.mark.skipif(gpu.available(), reason="a GPU runs the exercise here")
def test_a_thread_owning_neighbouring_chunks_is_not_yet():
    """The walk-through's scale_wide: (global thread) * UNROLL + k reads every chunk once, right
    values, but a warp's loads at one k spread over 2 KiB; the contract gives thread t the chunks
    base + k * blockDim.x. The twin sees every access: a chunk touched by another thread than its
    owner is a race with the owner's probe, whatever the SASS looks like."""
    from rmsnorm_lessons import twin

    if twin.available() is not None:
        pytest.skip(twin.available())
    text = _scale_solution()
    verdict = lesson09.check_scale_kernel(text.replace("const int i = base + k * blockDim.x;",
                                                       BLOCKED))
    assert verdict.status == "NOT YET", verdict.message
    for words in ("on the CPU twin", "belongs to thread 1 of block 0", "but thread 0",
                  "512 contiguous bytes", "base + k * blockDim.x"):
        assert words in verdict.message, (words, verdict.message)
    # the same chunks in another order of k: each warp still reads 512 contiguous bytes a step
    reversed_k = text.replace("const int i = base + k * blockDim.x;",
                              "const int i = base + (UNROLL - 1 - k) * blockDim.x;")
    verdict = lesson09.check_scale_kernel(reversed_k)
    assert verdict.status == "PASS" and "its own chunks" in verdict.message, verdict.message


def test_on_a_gpu_the_owners_are_checked_after_the_run(monkeypatch):
    """Where the GPU judged the numbers right, the twin's probe still looks at the owners (a GPU
    run cannot see which thread read what); where the twin cannot run, the verdict says the owners
    were not checked."""
    from rmsnorm_lessons import twin
    from rmsnorm_lessons.course.checking import kernel as kc
    from rmsnorm_lessons.course.verdict import passed

    if twin.available() is not None:
        pytest.skip(twin.available())
    monkeypatch.setattr(kc, "check_plain_kernel", lambda source, **kw: passed(
        "nvcc compiled yours_scale for sm_90 (...). scale_wide matches NumPy at 4 sizes."))
    blocked = _scale_solution().replace("const int i = base + k * blockDim.x;", BLOCKED)
    verdict = lesson09.check_scale_kernel(blocked)
    assert verdict.status == "NOT YET" and verdict.kinds == ("layout",), verdict.message
    assert verdict.message.startswith("the numbers were right on the GPU, but chunk 1")
    verdict = lesson09.check_scale_kernel(_scale_solution())
    assert verdict.passed and "saw each thread touch only its own chunks" in verdict.message
    monkeypatch.setattr(twin, "available", lambda: "the CPU twin needs g++ (hidden by the test)")
    verdict = lesson09.check_scale_kernel(blocked)
    assert verdict.passed and "was not checked (the CPU twin needs g++" in verdict.message


@pytest.mark.skipif(gpu.available(), reason="the saved opening: a GPU measures its own")
def test_the_barrier_diagnosis_says_lesson_10_removes_it():
    """The walk-through: 'True, but v7_fast leaves it' contradicted lesson 10, whose v7 removes
    the barrier per chunk. Both causes are right here; lesson 10's v7 removes both."""
    before = lesson09.opening()
    for cause, metric in (("barriers", "stall:barrier"),
                          ("few_loads_in_flight", "stall:long_scoreboard")):
        verdict = lesson09.check_diagnosis("latency", cause, metric, before.figure(metric))
        assert verdict.status == "PASS", verdict.message
        assert "leaves" not in verdict.message, verdict.message
        assert "lesson 10's v7_fast goes after it" in verdict.message, verdict.message



@pytest.mark.skipif(gpu.available(), reason="a GPU runs the exercise here")
def test_a_grid_stride_scale_wide_is_not_yet_with_its_block():
    """Walk-through 2 (09): ``t0 + k * gridDim.x * blockDim.x`` (coalesced, right numbers) passed
    with "each thread touching only its own chunks (base + k * blockDim.x)", untrue: the twin's
    race between blocks ("nothing orders them") was not read as an owner's. The exercise's
    contract gives each block its own 256 x UNROLL chunks, so it is NOT YET, saying so (not the
    per-thread-neighbours reason, false for this coalesced layout)."""
    from rmsnorm_lessons import twin

    if twin.available() is not None:
        pytest.skip(twin.available())
    text = _scale_solution()
    old = "const int i = base + k * blockDim.x;"
    assert text.count(old) >= 1
    stride = text.replace(old, "const int i = blockIdx.x * blockDim.x + threadIdx.x + k * "
                               "gridDim.x * blockDim.x;")
    verdict = lesson09.check_scale_kernel(stride)
    assert verdict.status == "NOT YET", verdict.message
    for words in ("of block 0", "of block 1", "each block its own 256 x 4 chunks"):
        assert words in verdict.message, (words, verdict.message)
    assert "2048 bytes" not in verdict.message, verdict.message
    assert lesson09.check_scale_kernel(text).passed
