"""rmsnorm_lessons.core.child (CPU): the command line, the run (exit code, output, timeout,
environment), the rung spec a child rebuilds a rung from, and the child's refusal without a GPU;
gpu.copy_bandwidth's hook."""
import json
import sys

import numpy as np
import pytest

from rmsnorm_lessons.core import build, child, gpu, ladder
from rmsnorm_lessons.inspection import nsight, sanitizer
from rmsnorm_lessons.speed import bench


def test_command_puts_the_wrapper_in_front_of_this_python():
    assert child.command(["-c", "pass"]) == [sys.executable, "-c", "pass"]
    cmd = child.command(["-m", "x", 8, 256], ["tool", "--flag"])
    assert cmd == ["tool", "--flag", sys.executable, "-m", "x", "8", "256"]


def test_run_captures_both_streams_the_exit_code_and_the_environment(tmp_path):
    code = ("import os, sys; print('out', os.environ['CHILD_TEST'], "
            "os.environ['PYTHONUNBUFFERED']); "
            "print('err', file=sys.stderr); print(os.getcwd()); sys.exit(3)")
    done = child.run(child.command(["-c", code]), env={"CHILD_TEST": "yes"}, cwd=tmp_path)
    assert done.returncode == 3 and not done.timed_out
    assert done.stdout.splitlines() == ["out yes 1", str(tmp_path)]
    assert done.stderr.strip() == "err" and done.output == done.stdout + done.stderr


def test_a_child_past_its_timeout_is_killed_and_keeps_what_it_printed():
    done = child.run(child.command(["-c", "import time; print('started'); time.sleep(30)"]),
                     timeout=2)
    assert done.timed_out and done.returncode is None
    assert "started" in done.stdout


@pytest.mark.parametrize("timeout", [0, -1, "10"])
def test_a_bad_timeout_is_refused_before_anything_starts(timeout):
    with pytest.raises(ValueError, match="timeout must be a positive number"):
        child.run(["/nonexistent"], timeout=timeout)


def test_the_spec_rebuilds_the_rung_it_was_made_from(tmp_path):
    rung = ladder.get("v6_last_block")
    source = tmp_path / "v6.cu"
    source.write_text(build.kernel_source("v6_last_block"))
    spec = child.rung_spec(rung, (129, 777), str(source))
    assert json.loads(json.dumps(spec)) == spec and spec["C"] == 776  # rounded down to the multiple
    # the shipped name is taken in the child's ladder
    assert spec["name"] == "v6_last_block_as_built"
    copy = child.rebuild(spec)
    try:
        assert copy.name == "v6_last_block_as_built" and copy.kernels == rung.kernels
        assert copy.defines == rung.defines and copy.c_multiple == rung.c_multiple
        assert ladder.plan(copy, 129, 776, gpu.H200) == ladder.plan(rung, 129, 776, gpu.H200)
    finally:
        ladder.unregister(copy.name)
    assert sanitizer.child_spec is child.rung_spec


def test_a_rung_without_a_shipped_plan_is_refused():
    rung = ladder.get("v3_smem")
    fake = type("R", (), {"plan": lambda *a: [], "shared_memory": None, "name": "x"})()
    with pytest.raises(ValueError, match="plan from rmsnorm_lessons.core.ladder"):
        child.rung_spec(fake, (8, 256), "/tmp/x.cu")
    assert child.rung_spec(rung, (8, 256), "/tmp/x.cu")["plan_module"] == "v3_smem"


def test_calls_must_be_a_whole_number():
    with pytest.raises(ValueError, match="calls must be a whole number"):
        child.run_rung("v3_smem", 8, 256, calls=0)


def test_the_child_without_a_gpu_says_so_and_its_usage_is_checked():
    if gpu.available():
        pytest.skip("a GPU is here")
    spec = child.rung_spec(ladder.get("v3_smem"), (8, 256), "/nonexistent.cu")
    spec["name"], spec["source"] = "v3_copy", __file__  # never read: no GPU stops the child first
    done = child.run(child.command(["-m", "rmsnorm_lessons.core.child", json.dumps(spec)]),
                     timeout=120)
    assert done.returncode != 0 and "GPU" in done.stderr
    usage = child.run(child.command(["-m", "rmsnorm_lessons.core.child"]), timeout=120)
    assert usage.returncode == 2 and "usage" in usage.stderr


def test_nsight_and_the_sanitizer_build_their_commands_on_the_child_command():
    cmd = nsight.command("ncu", "v3_smem", 64, 256)
    assert cmd[cmd.index(sys.executable):] == [sys.executable, "-m",
                                               "rmsnorm_lessons.inspection.nsight",
                                               "--launch",
                                               "v3_smem", "64", "256"]
    wrapped = sanitizer.command("compute-sanitizer", "memcheck", child.command(["-c", "pass"]))
    assert wrapped == sanitizer.wrapper("compute-sanitizer", "memcheck") + [sys.executable, "-c",
            "pass"]
    assert not hasattr(nsight, "REASONS") and "bench" not in vars(nsight)


class _Buffer(int):
    freed = 0

    def free(self):
        _Buffer.freed += 1


class _Driver:
    def __init__(self):
        self.set = []

    def mem_alloc(self, nbytes):
        return _Buffer(0x1000 + nbytes)

    def memset_d8(self, buf, value, nbytes):
        self.set.append((int(buf), value, nbytes))


def test_copy_bandwidth_with_a_timing_hook_times_the_copy_its_way(monkeypatch):
    drv = _Driver()
    monkeypatch.setattr(gpu, "driver", lambda: drv)
    _Buffer.freed = 0
    seen = []

    def timed(dst, src):
        seen.append((int(dst), int(src)))
        return [0.5, 0.25, 1.0]  # the median, 0.5 ms, counts

    gbps = gpu.copy_bandwidth(1 << 20, timed=timed)
    assert gbps == pytest.approx(2 * (1 << 20) / 0.5e-3 / 1e9)
    assert len(seen) == 1 and drv.set == [(seen[0][1], 1, 1 << 20)]  # the source is filled first
    assert _Buffer.freed == 2  # both buffers, after the timing


def test_the_copy_kernel_is_timed_through_the_one_copy_bandwidth(monkeypatch):
    calls = []
    monkeypatch.setattr(bench.build, "source_module", lambda name: type(
        "M", (), {"get_function": staticmethod(lambda fn: calls.append((name, fn)) or (lambda *a,
                **k: None))})())
    monkeypatch.setattr(bench, "time_ms", lambda launch, warmup, repeats: [float(repeats)] * 3)
    monkeypatch.setattr(gpu, "copy_bandwidth", lambda nbytes, timed: (nbytes, np.median(timed(1,
            2))))
    assert bench.copy_kernel_bandwidth(1 << 20, repeats=7) == (1 << 20, 7.0)
    assert calls == [("stream_ceiling", "stream_copy")]


def test_the_child_imports_this_very_package(tmp_path):
    import rmsnorm_lessons

    code = "import rmsnorm_lessons; print(rmsnorm_lessons.__file__)"
    done = child.run(child.command(["-c", code]), env={"PYTHONPATH": ""}, cwd=tmp_path, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == rmsnorm_lessons.__file__, done.output
