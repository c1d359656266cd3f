"""tools/sanitize.py without a GPU (CPU): its summary parser, its plan, and its refusal without the
sanitizer."""
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rmsnorm_lessons.core import build, ladder

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("sanitize_tool", ROOT / "tools" / "sanitize.py")
sanitize = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sanitize)


def _run(*args):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, str(ROOT / "tools" / "sanitize.py"), *args],
                          capture_output=True,
                          text=True, env=env, timeout=120)


def test_parse_clean_memcheck():
    out = ("driver: v2_warp N=8 C=256: ok\n========= COMPUTE-SANITIZER\n"
           "========= ERROR SUMMARY: 0 errors\n")
    assert sanitize.parse_summary(out) == (0, 0)


def test_parse_errors():
    out = ("========= Invalid __global__ write of size 16 bytes\n=========     at "
           "rmsnorm_backward_v6+0x1a0\n"
           "========= ERROR SUMMARY: 3 errors\n")
    assert sanitize.parse_summary(out) == (3, 0)
    assert sanitize.parse_summary("========= ERROR SUMMARY: 1 error\n") == (1, 0)


def test_parse_racecheck():
    out = ("========= RACECHECK SUMMARY: 2 hazards displayed (1 error, 1 warning)\n"
           "========= ERROR SUMMARY: 0 errors\n")
    assert sanitize.parse_summary(out) == (1, 1)
    out = "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)\n"
    assert sanitize.parse_summary(out) == (0, 0)


def test_no_summary_is_none():
    assert sanitize.parse_summary("Traceback (most recent call last):\n  ...\n") is None
    assert sanitize.parse_summary("") is None


def test_shapes_are_a_small_and_an_odd_one_the_version_accepts():
    for v in ladder.SHIPPED:
        shapes = sanitize.shapes_for(v)
        assert len(shapes) == 2
        assert all(C % v.c_multiple == 0 for _, C in shapes)
        assert any(N % 2 == 1 and C % 256 for N, C in shapes)


def test_list_names_every_tool_and_version():
    p = _run("--list")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert len(lines) == len(sanitize.TOOLS) * len(ladder.SHIPPED)
    for tool in sanitize.TOOLS:
        for v in (r.name for r in ladder.SHIPPED):
            assert any(f"--tool {tool} " in line and line.endswith(f"--launch {v}")
                       for line in lines), (tool, v)


def test_unknown_version_refused():
    p = _run("--list", "--versions", "v9_missing")
    assert p.returncode == 2 and p.stderr.startswith("sanitize: version must be one of")
    assert "Traceback" not in p.stderr


@pytest.mark.skipif(build.find_tool("compute-sanitizer") is not None,
                    reason="compute-sanitizer is here")
def test_without_compute_sanitizer_exit_2_with_one_sentence():
    p = _run()
    assert p.returncode == 2
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and "compute-sanitizer was not found" in lines[0]
