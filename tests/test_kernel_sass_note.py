"""A kernel check where nvdisasm is missing says which SASS checks it could not run, and calls
checked only what it read: the SASS, or nvcc's resource report (CPU, nvcc)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from rmsnorm_lessons.core import build, gpu
from test_kernel_exercises import kernel_text

needs_nvcc = pytest.mark.skipif(build.find_nvcc() is None, reason="nvcc not found")
no_gpu_here = pytest.mark.skipif(gpu.available(),
                                 reason="on a GPU the check runs the kernel: this is the no-GPU "
                                        "verdict")


@needs_nvcc
@no_gpu_here
def test_without_nvdisasm_the_verdict_says_what_it_could_not_check():
    """Where nvdisasm is missing the SASS checks are named as not checked, and only what nvcc's
    report shows is said to be checked (a new process: no listing cached from other tests)."""
    code = (
        "import json, sys\n"
        "from rmsnorm_lessons.core import build\n"
        "from rmsnorm_lessons.course import student\n"
        "find = build.find_tool\n"
        "build.find_tool = lambda t: None if t == 'nvdisasm' else find(t)\n"
        "from rmsnorm_lessons.lessons import lesson02\n"
        f"text = json.loads({json.dumps(kernel_text('02_naive'))!r})\n"
        "print(lesson02.check_v1_kernel(student.solution_only(text)).message)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    message = p.stdout
    assert "Checked in the SASS" not in message and "skipped" not in message, message
    assert "Checked in nvcc's report: no local memory" in message
    assert ("Not checked here (nvdisasm was not found on PATH, under CUDA_HOME or in NVIDIA's pip "
            "wheels, so there is no SASS listing): a global atomic adds to dweight") in message
