"""A learner's kernel runs first in a child process (rmsnorm_lessons/course/checking/child.py).

Here (CPU): the job protocol (a rung whose plan is a function defined inside a lesson's check
travels to a real child and back as JSON), a fake child's outcome, a crash by a signal, a fault the
GPU reported, a timeout, memcheck's line named from its report, the sanitizer's default and its
sentence where it is missing, and the order of a check (the sanitizer only after the numbers pass).
Lesson 03's check_warp_sum runs its kernel in a child too: its lanes judged here, a crash NOT
YET. On a GPU (marker ``gpu``): a misaligned 16-byte load is NOT YET naming its line, and the right
kernel PASSes right after it in the same process; the same for a warp_sum reading a wild pointer.
"""
from __future__ import annotations


import pytest

from rmsnorm_lessons.core import build, child, gpu, ladder
from rmsnorm_lessons.course.checking import child as kernel_child
from rmsnorm_lessons.course.checking import kernel as kernel_check
from rmsnorm_lessons.course.checking import running as kernel_running
from rmsnorm_lessons.course.checking.running import Outcome
from rmsnorm_lessons.inspection import sanitizer
from rmsnorm_lessons.lessons import lesson06

TEXT = "__global__ void k() {\n    int a = 1;\n    x128 x = load128(inp_row + c + 1);\n}\n"


def _closure_rung(name="yours_job"):
    v7 = ladder.v7_fast
    extra = 24

    def shared(C, block):  # a function defined inside another, closing over a module and a number
        return v7.MAX_BLOCK + extra + C

    return ladder.rung_from_source(name=name, source=f'#line 1 "{name}"\n{TEXT}', like="v3_smem",
                                   shared_memory=shared, register_it=False)


def test_a_job_carries_a_rung_with_a_local_function_to_a_real_child_and_back():
    rung = _closure_rung()
    done, result = child.run_job("rmsnorm_lessons.core.ladder:shared_memory",
                                 dict(version=rung, C=100), timeout=120)
    assert done.returncode == 0, done.output
    assert result == ladder.v7_fast.MAX_BLOCK + 24 + 100
    done, result = child.run_job("json:loads", dict(s="[1, 2]"), timeout=120)
    assert result == [1, 2]


def test_a_job_that_aborts_is_reported_by_its_signal():
    done, result = child.run_job("os:abort", {}, timeout=120)
    assert result is None and done.returncode is not None and done.returncode < 0
    assert "SIGABRT" in kernel_child.what_happened(done, result, 60)


def test_a_bad_action_is_refused(tmp_path):
    with pytest.raises(ValueError, match="module:function"):
        child.write_job(tmp_path, "json.loads", {})


class FakeChild:
    """A runner in place of child.run_job: answers each call with the next (Finished, result)."""

    def __init__(self, *answers):
        self.answers, self.calls = list(answers), []

    def __call__(self, action, kwargs, wrapper=(), timeout=600, env=None):
        self.calls.append((action, kwargs, list(wrapper)))
        return self.answers.pop(0)


RUNG = ladder.get("v4_vec_bf16")
SHAPES = kernel_running.shapes_for(RUNG)


def test_a_childs_outcome_comes_back_as_it_was_sent():
    fake = FakeChild((child.Finished(0, "kernel_child: at 129 1600\n", ""),
                      {"ok": False, "message": "at N=129, C=1600: dinp is wrong", "kinds":
                       ["factor"]}))
    ran = kernel_child.run_in_child(RUNG, SHAPES, time_shape=(8192, 1024), runner=fake)
    assert ran.outcome == Outcome(False, "at N=129, C=1600: dinp is wrong", ("factor",))
    assert not ran.crashed and ran.shape == (129, 1600) and len(fake.calls) == 1
    action, kwargs, wrapper = fake.calls[0]
    assert action == kernel_child.ACTION and wrapper == []
    assert kwargs["rung"] is RUNG and kwargs["shapes"] == SHAPES
    assert kwargs["time_shape"] == (8192, 1024)


MEMCHECK = """========= COMPUTE-SANITIZER
========= Invalid __global__ read of size 16 bytes
=========     at rmsnorm_backward_v4+0x2d0 in yours_v4:3
=========     by thread (1,0,0) in block (0,0,0)
=========     Address 0x7f0000000202 is misaligned
=========
========= ERROR SUMMARY: 1 error
"""


def test_a_child_killed_by_a_signal_is_not_yet_with_the_shape_and_memchecks_line(monkeypatch):
    monkeypatch.setattr(sanitizer, "find", lambda: "/usr/bin/compute-sanitizer")
    at = "kernel_child: at 129 1600\nkernel_child: at 333 8\n"
    fake = FakeChild((child.Finished(-11, at, "Fatal Python error"), None),
                     (child.Finished(86, "", MEMCHECK), None))
    text = '#line 1 "yours_v4"\n' + TEXT
    ran = kernel_child.run_in_child(RUNG, SHAPES, seed=5, runner=fake, text=text)
    assert ran.crashed and not ran.outcome.ok and ran.outcome.kinds == ("error",)
    message = ran.outcome.message
    assert message.startswith("at N=333, C=8 your kernel crashed") and "SIGSEGV" in message
    assert "untouched" in message and "restart" not in message
    assert "Invalid __global__ read of size 16 bytes, at line 3 of your text: " \
           "x128 x = load128(inp_row + c + 1);" in message, message
    assert "is misaligned" in message
    # memcheck runs the shape it died at alone, with that shape's own inputs (seed + its index)
    action, kwargs, wrapper = fake.calls[1]
    assert wrapper[:3] == ["/usr/bin/compute-sanitizer", "--tool", "memcheck"]
    assert kwargs["shapes"] == [(333, 8)] and kwargs["seed"] == 5 + SHAPES.index((333, 8))
    assert kwargs["time_shape"] is None


def test_a_fault_the_child_caught_is_a_crash_and_memcheck_is_missing_here(monkeypatch):
    monkeypatch.setattr(sanitizer, "find", lambda: None)
    result = {"ok": False, "kinds": ["error"],
              "message": "at N=8192, C=1024 (the timing shape) running it failed: LaunchError: "
                         "cuCtxSynchronize failed: misaligned address"}
    fake = FakeChild((child.Finished(0, "kernel_child: at 8192 1024\n", ""), result))
    ran = kernel_child.run_in_child(RUNG, SHAPES, time_shape=(8192, 1024), runner=fake)
    assert ran.crashed and "a misaligned address" in ran.outcome.message
    assert "compute-sanitizer is not installed here" in ran.outcome.message
    assert len(fake.calls) == 1


def test_a_child_past_its_timeout_is_stopped_and_not_run_again():
    fake = FakeChild((child.Finished(None, "kernel_child: at 1000 776\n", ""), None))
    ran = kernel_child.run_in_child(RUNG, SHAPES, runner=fake, timeout=7)
    assert ran.crashed and "did not finish in 7 s" in ran.outcome.message
    assert len(fake.calls) == 1  # a kernel that never ends is not run again under memcheck


def test_memcheck_at_the_timing_shape_runs_that_call_alone(monkeypatch):
    monkeypatch.setattr(sanitizer, "find", lambda: "cs")
    fake = FakeChild((child.Finished(1, "kernel_child: at 8192 1024\n", "Traceback"), None),
                     (child.Finished(0, "", "========= ERROR SUMMARY: 0 errors\n"), None))
    ran = kernel_child.run_in_child(RUNG, SHAPES, time_shape=(8192, 1024), runner=fake)
    assert "exited with code 1" in ran.outcome.message
    assert "memcheck found no error" in ran.outcome.message
    kwargs = fake.calls[1][1]
    assert kwargs["shapes"] == [] and kwargs["time_shape"] == (8192, 1024)


def test_sanitizer_lines_of_an_entry():
    entry = ["Error: Race reported between Write access at k+0x5c0 in /tmp/a/yours_v5.cu:67",
             "and Read access at k+0x6a0 in yours_v5:70 [2048 hazards]"]
    assert sanitizer.lines_of(entry, "yours_v5") == [67, 70]
    assert sanitizer.lines_of(entry, "v5_two_pass") == []


# --- the sanitizer: on by default, after the numbers, a hazard is NOT YET ------------------------


def test_the_lessons_checks_run_the_sanitizer_by_default():
    import inspect

    from rmsnorm_lessons import lessons
    from rmsnorm_lessons.course import registry

    # every kernel exercise but lesson 09's y = a * x: no rung, nothing shared to race on
    for fn in [lessons.check_function(lesson.kernel_exercise)
               for lesson in registry.kernel_exercises() if lesson.number != "09"]:
        assert inspect.signature(fn).parameters["sanitize"].default is True, fn.__name__
        assert "sanitize=False" in fn.__doc__, fn.__name__
    assert inspect.signature(kernel_check.check_kernel).parameters["sanitize"].default is True
    assert "sanitize=False" in kernel_check.check_kernel.__doc__


def test_without_compute_sanitizer_the_sentence_says_so(monkeypatch):
    monkeypatch.setattr(build, "find_tool", lambda tool: None)
    found = kernel_running.sanitize_result(RUNG)
    assert not found.hazard
    assert found.sentence == "compute-sanitizer is not installed here, so no race check was run"


def test_a_hazard_is_a_finding_and_a_tool_that_did_not_run_is_not(monkeypatch):
    race = ("========= Error: Race reported between Write access at k+0x5c0 in yours_v5:67\n"
            "=========     and Read access at k+0x6a0 in yours_v5:70 [2048 hazards]\n"
            "========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)\n")
    reports = {"racecheck": sanitizer.Report("racecheck", "yours_v5", 86, race),
               "synccheck": sanitizer.Report("synccheck", "yours_v5", 1, "Traceback ...")}
    monkeypatch.setattr(sanitizer, "find", lambda: "cs")
    monkeypatch.setattr(sanitizer, "run", lambda rung, tool, shape, timeout: reports[tool])
    found = kernel_running.sanitize_result(RUNG)
    assert found.hazard and "racecheck reports 1 error(s)" in found.sentence
    assert "yours_v5:67" in found.sentence
    reports["racecheck"] = sanitizer.Report(
        "racecheck", "x", 0, "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, "
                             "0 warnings)\n")
    found = kernel_running.sanitize_result(RUNG)
    assert not found.hazard and "found no hazard" in found.sentence
    assert "synccheck did not finish" in found.sentence


@pytest.fixture
def staged(monkeypatch):
    """check_kernel with its steps replaced: what ran, in order."""
    steps = []
    seen = kernel_check.Inspected("sm_90", None, "nvcc compiled yours_v4 for sm_90 (...).", "")
    monkeypatch.setattr(kernel_check, "inspect_text", lambda *a, **k: (None, seen))
    outcome = {"value": Outcome(True, "matches the float64 reference at 8 shapes")}

    def in_child(rung, shapes, **kw):
        steps.append(("child", kw["time_shape"]))
        return kernel_child.ChildRun(outcome["value"], False, None, child.Finished(0, "", ""))

    hazard = {"value": False}

    def sanitized(rung):
        steps.append("sanitize")
        return kernel_running.Sanitized(hazard["value"], "compute-sanitizer: racecheck reports "
                                                         "1 error(s) on yours_v4"
                                        if hazard["value"] else "found no hazard")

    monkeypatch.setattr(kernel_child, "run_in_child", in_child)
    monkeypatch.setattr(kernel_running, "sanitize_result", sanitized)
    monkeypatch.setattr(kernel_check, "time_against",
                        lambda *a, **k: steps.append("time") or "yours 0.1 ms, v4 0.1 ms")
    yield steps, outcome, hazard
    ladder.unregister("yours_v4")


def test_a_check_runs_the_child_then_the_sanitizer_then_the_timing(staged):
    steps, outcome, hazard = staged
    verdict = lesson06.check_v4_kernel("// text")
    assert verdict.status == "PASS" and steps == [("child", (8192, 1024)), "sanitize", "time"]
    hazard["value"] = True
    steps.clear()
    verdict = lesson06.check_v4_kernel("// text")
    assert verdict.status == "NOT YET" and "racecheck reports" in verdict.message
    assert verdict.kinds == ("race",) and steps == [("child", (8192, 1024)), "sanitize"]
    steps.clear()
    outcome["value"] = Outcome(False, "at N=333, C=8: dinp is wrong", ("factor",))
    verdict = lesson06.check_v4_kernel("// text")
    assert verdict.status == "NOT YET" and steps == [("child", (8192, 1024))]  # no sanitizer
    steps.clear()
    outcome["value"] = Outcome(True, "matches")
    hazard["value"] = False
    verdict = lesson06.check_v4_kernel("// text", sanitize=False)
    assert verdict.status == "PASS" and steps == [("child", (8192, 1024)), "time"]


# --- on the GPU ----------------------------------------------------------------------------------

MISALIGNED = "x128 g = load128(dout_row + c), x = load128(inp_row + c), w = load128(weight + c);"


@pytest.mark.gpu
def test_a_misaligned_load_is_not_yet_naming_its_line_and_the_right_kernel_passes_after_it():
    from test_kernel_exercises import kernel_text

    gpu.require()
    right = kernel_text("06_vectorized")
    assert right.count(MISALIGNED) == 1
    wrong = right.replace(MISALIGNED, MISALIGNED.replace("inp_row + c)", "inp_row + c + 1)"))
    # line k of the text is the k-th after '#line 1' (the text starts with a line break)
    line = 1 + next(i for i, ln in enumerate(wrong.split("\n")) if "inp_row + c + 1" in ln)
    verdict = lesson06.check_v4_kernel(wrong, sanitize=False)
    assert verdict.status == "NOT YET", verdict.message
    assert "crashed" in verdict.message and "misaligned" in verdict.message, verdict.message
    if sanitizer.find() is not None:
        assert f"at line {line} of your text" in verdict.message, verdict.message
    verdict = lesson06.check_v4_kernel(right)
    assert verdict.status == "PASS", verdict.message
    assert "yours" in verdict.message and "ms" in verdict.message


def test_a_plain_kernel_runs_its_lessons_check_in_the_child_and_a_crash_names_the_line(
        monkeypatch):
    monkeypatch.setattr(sanitizer, "find", lambda: "cs")
    memcheck = MEMCHECK.replace("yours_v4:3", "yours_scale:2")
    fake = FakeChild((child.Finished(-6, "", "aborted"), None), (child.Finished(86, "", memcheck),
                                                                  None))
    run = lambda module: Outcome(True, "fine")  # noqa: E731 (a lesson passes a lambda)
    ran = kernel_child.run_plain_in_child("yours_scale", "int a;\nint b;\n", run, runner=fake)
    assert ran.crashed and "SIGABRT" in ran.outcome.message
    assert "at line 2 of your text: int b;" in ran.outcome.message, ran.outcome.message
    assert [c[0] for c in fake.calls] == [kernel_child.PLAIN_ACTION] * 2
    assert fake.calls[0][1]["run"] is run and fake.calls[1][2][2] == "memcheck"


def test_a_plain_kernels_race_note_reads_its_sass():
    class I:
        def __init__(self, opcode):
            self.opcode, self.offset = opcode, 0

    def listing(*opcodes):
        fn = type("F", (), {"instructions": [I(o) for o in opcodes]})()
        return type("L", (), {"functions": {"scale_wide": fn}})()

    note = kernel_check._plain_race_note(listing("LDG.E.128", "STG.E.128"), ("scale_wide",))
    assert "no barrier and no shared memory" in note
    note = kernel_check._plain_race_note(listing("BAR.SYNC", "STS"), ("scale_wide",))
    assert "has barriers or shared memory" in note
    assert "not a rung" in kernel_check._plain_race_note(None, ("scale_wide",))


@pytest.mark.skipif(build.find_nvcc() is None, reason="nvcc not found")
def test_the_childs_build_comes_from_the_parents_disk_cache(monkeypatch, tmp_path):
    """The parent compiles the text while inspecting it; the child (another process: no cache in
    memory) finds the cubin on disk and runs no nvcc."""
    monkeypatch.setenv("RMSNORM_CACHE_DIR", str(tmp_path))
    rung = ladder.rung_from_source(name="yours_cached", source='#line 1 "yours_cached"\n'
                                   'extern "C" __global__ void k(float* x) { x[0] = 1.0f; }\n',
                                   like="v3_smem", kernels=("k",), register_it=False)
    first = build.compile_file(rung, "sm_90")
    build._compile_keyed.cache_clear()  # as in a new process

    def no_nvcc(*args):
        raise AssertionError("nvcc ran again")

    monkeypatch.setattr(build, "_run_nvcc", no_nvcc)
    assert build.compile_file(rung, "sm_90").binary == first.binary


def test_a_child_that_never_reached_the_kernel_does_not_blame_it():
    fake = FakeChild((child.Finished(1, "", "rmsnorm_lessons.core.gpu.GpuUnavailable: no device"),
                      None))
    ran = kernel_child.run_in_child(RUNG, SHAPES, runner=fake)
    assert not ran.outcome.ok and "stopped before it ran your kernel" in ran.outcome.message
    assert "GpuUnavailable" in ran.outcome.message and len(fake.calls) == 1
