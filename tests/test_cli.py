"""The command line (CPU): info and inspect work without a GPU; check and bench say in one sentence why not."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rmsnorm_lessons import gpu, kernels

ROOT = Path(__file__).resolve().parent.parent


def _cli(*args, timeout=120):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return subprocess.run([sys.executable, "-m", "rmsnorm_lessons", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_info_says_what_works_here():
    p = _cli("info")
    assert p.returncode == 0, p.stderr
    out = p.stdout
    for field in ("python", "numpy", "pycuda", "nvcc", "GPU", "works here:", "versions"):
        assert field in out, f"info does not print {field!r}:\n{out}"
    assert "compiling every kernel" in out  # nvcc is present wherever the tests run
    assert ", ".join(kernels.VERSIONS) in out
    if not gpu.available():
        assert "GPU        none usable:" in out
        assert "not here:   launching kernels" in out
    assert "Traceback" not in p.stderr


def test_inspect_prints_resources_without_a_gpu():
    p = _cli("inspect", "v1_naive", "--arch", "sm_90")
    assert p.returncode == 0, p.stderr
    assert "rmsnorm_backward_v1 (sm_90):" in p.stdout and "registers" in p.stdout and "spills" in p.stdout
    assert "dynamic shared memory at C=4096: 0 B" in p.stdout


def test_inspect_shared_memory_figure():
    p = _cli("inspect", "v6_last_block", "--C", "1024")
    assert p.returncode == 0, p.stderr
    assert "dynamic shared memory at C=1024: 23552 B (block of 512 threads)" in p.stdout


def test_inspect_unknown_version_is_one_sentence():
    p = _cli("inspect", "v9_missing")
    assert p.returncode == 2
    assert "Traceback" not in p.stderr
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("inspect: "), p.stderr
    assert "v9_missing" in lines[0] and "v1_naive" in lines[0]  # names what was asked and what exists


@pytest.mark.skipif(gpu.available(), reason="a GPU is here: check and bench run for real")
@pytest.mark.parametrize("command", ["check", "bench"])
def test_gpu_commands_exit_2_with_one_sentence(command):
    p = _cli(command)
    assert p.returncode == 2, (p.stdout, p.stderr)
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith(f"{command}: needs a GPU. ")
    assert "Traceback" not in p.stderr and p.stdout == ""


def test_usage_errors():
    p = _cli()
    assert p.returncode == 2 and "usage:" in p.stderr
