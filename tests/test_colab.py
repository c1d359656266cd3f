"""Setting a Colab runtime up (rmsnorm_lessons/course/colab.py): what it installs given what the
runtime has, one line a step, and a failed step said, not raised (CPU; pip is replaced by a
recorder)."""
from __future__ import annotations

import json
import subprocess
from importlib import metadata

import pytest

from rmsnorm_lessons.core import build
from rmsnorm_lessons.course import colab


def test_colab_is_detected_as_colab_detects_itself():
    assert colab.in_colab({"COLAB_RELEASE_TAG": "release-colab_20260101-060000"}, {})
    assert colab.in_colab({}, {"google.colab": object()})
    assert not colab.in_colab({}, {})
    assert not colab.in_colab({"COLAB_RELEASE_TAG": ""}, {})


@pytest.mark.parametrize("has,wants", [
    (dict(has_driver=True, has_pycuda=False, has_nvcc=False, has_nvdisasm=False, widgets=(7, 7)),
     [colab.PYCUDA, *colab.NVCC_WHEELS, colab.NVDISASM_WHEEL, colab.IPYWIDGETS]),
    # a CPU runtime gets no PyCUDA: there is no driver to build it for or to run it with
    (dict(has_driver=False, has_pycuda=False, has_nvcc=True, has_nvdisasm=True, widgets=None),
     [colab.IPYWIDGETS]),
    (dict(has_driver=True, has_pycuda=True, has_nvcc=True, has_nvdisasm=True, widgets=(8, 1)),
     []),
])
def test_the_plan_installs_only_what_is_missing(has, wants):
    steps = colab.plan(**has)
    assert [arg for _, args in steps for arg in args] == wants
    assert all(why and not why.endswith(".") for why, _ in steps)


class _Pip:
    """Records pip's command lines; fails those that name ``fail``."""

    def __init__(self, fail=()):
        self.calls, self.fail = [], fail

    def __call__(self, cmd, **kwargs):
        self.calls.append(cmd)
        bad = any(f in " ".join(cmd) for f in self.fail)
        return subprocess.CompletedProcess(cmd, 1 if bad else 0, "",
                                           "ERROR: No matching distribution found for x\n"
                                           if bad else "")


def _runtime(monkeypatch, *, driver, pycuda, nvcc, nvdisasm, widgets, revision=None):
    monkeypatch.setattr(colab, "_has_driver", lambda: driver)
    monkeypatch.setattr(colab, "_importable", lambda module: pycuda)
    monkeypatch.setattr(build, "find_nvcc", lambda: "/usr/bin/nvcc" if nvcc else None)
    monkeypatch.setattr(build, "find_tool", lambda t: "/usr/bin/x" if nvdisasm else None)
    monkeypatch.setattr(colab, "_version", lambda d: widgets)
    monkeypatch.setattr(colab, "installed_revision", lambda: revision)


def test_complete_installs_says_and_goes_on_past_a_failure(monkeypatch):
    _runtime(monkeypatch, driver=True, pycuda=False, nvcc=False, nvdisasm=True, widgets=None)
    pip, said = _Pip(fail=("nvidia-nvvm",)), []
    colab.complete("a" * 40, "/src", runner=pip, say=said.append)
    installed = [c[c.index("-q") + 1:] for c in pip.calls]
    assert installed == [[colab.PYCUDA], list(colab.NVCC_WHEELS), [colab.IPYWIDGETS]]
    assert said[0].startswith("Installing PyCUDA, to launch kernels")
    failed = [s for s in said if s.startswith("  could not install")]
    assert failed == ["  could not install " + " ".join(colab.NVCC_WHEELS)
                      + ": ERROR: No matching distribution found for x"]
    assert said[-1].startswith("Installing ipywidgets 8")


def test_complete_again_installs_nothing(monkeypatch):
    _runtime(monkeypatch, driver=True, pycuda=True, nvcc=True, nvdisasm=True, widgets=(8, 1))
    pip, said = _Pip(), []
    colab.complete("a" * 40, "/src", runner=pip, say=said.append)
    assert pip.calls == [] and said == ["Colab: everything the course uses is installed."]


def test_a_cpu_runtime_is_told_why_there_is_no_pycuda(monkeypatch):
    _runtime(monkeypatch, driver=False, pycuda=False, nvcc=True, nvdisasm=True, widgets=(8, 1))
    pip, said = _Pip(), []
    colab.complete(None, None, runner=pip, say=said.append)
    assert pip.calls == [] and said[0].startswith("No NVIDIA driver in this runtime")


def test_another_revision_installed_is_reinstalled_and_a_restart_asked(monkeypatch):
    _runtime(monkeypatch, driver=False, pycuda=False, nvcc=True, nvdisasm=True, widgets=(8, 1),
             revision="b" * 40)
    pip, said = _Pip(), []
    colab.complete("a" * 40, "git+https://example/x.git@" + "a" * 40, runner=pip,
                   say=said.append)
    assert pip.calls[0][-3:] == ["--force-reinstall", "--no-deps",
                                 "git+https://example/x.git@" + "a" * 40]
    assert said[0] == (f"The course installed here is revision {'b' * 12}; this notebook is "
                       f"{'a' * 12}: reinstalling it.")
    assert "restart the runtime" in said[1]


def test_the_installed_revision_is_read_from_pips_record(monkeypatch):
    class Dist:
        def __init__(self, text):
            self.text = text

        def read_text(self, name):
            assert name == "direct_url.json"
            return self.text

    vcs = {"url": "https://github.com/o/r.git",
           "vcs_info": {"vcs": "git", "commit_id": "c" * 40, "requested_revision": "c" * 40}}
    monkeypatch.setattr(metadata, "distribution", lambda name: Dist(json.dumps(vcs)))
    assert colab.installed_revision() == "c" * 40
    monkeypatch.setattr(metadata, "distribution",
                        lambda name: Dist(json.dumps({"url": "file:///x.whl",
                                                      "archive_info": {}})))
    assert colab.installed_revision() is None
    monkeypatch.setattr(metadata, "distribution", lambda name: Dist(None))
    assert colab.installed_revision() is None
