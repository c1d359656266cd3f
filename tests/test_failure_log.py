"""conftest.py's RMSNORM_FAILURE_LOG: a failure's report is written when it happens (CPU)."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_a_failure_is_logged_as_it_happens(tmp_path):
    probe = tmp_path / "test_probe.py"
    probe.write_text("def test_fine():\n    pass\n\n\ndef test_broken():\n    assert 6 * 7 == 43, "
                     "'deliberate'\n")
    log = tmp_path / "failures.log"
    # as when this test itself runs in an xdist worker (the GPU run): the probe inherits the
    # worker's environment, and is still a pytest of its own whose failures must be logged
    env = {**os.environ, "RMSNORM_FAILURE_LOG": str(log), "PYTEST_XDIST_WORKER": "gw3"}
    # the repository's hooks, beside the probe
    shutil.copy(ROOT / "conftest.py", tmp_path / "conftest.py")
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(probe)],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 1, p.stdout + p.stderr
    text = log.read_text()
    assert "test_probe.py::test_broken (call)" in text and "deliberate" in text
    assert "test_fine" not in text


def test_under_xdist_each_failure_is_logged_once(tmp_path):
    pytest.importorskip("xdist", reason="pytest-xdist is not installed (the GPU run uses it)")
    probe = tmp_path / "test_probe.py"
    probe.write_text("def test_broken():\n    assert 6 * 7 == 43, 'deliberate'\n")
    log = tmp_path / "failures.log"
    shutil.copy(ROOT / "conftest.py", tmp_path / "conftest.py")
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "-p", "no:cacheprovider",
                        str(probe)],
                       cwd=tmp_path, env={**os.environ, "RMSNORM_FAILURE_LOG": str(log)},
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 1, p.stdout + p.stderr
    # by the controller, not also the worker
    assert log.read_text().count("test_probe.py::test_broken (call)") == 1
