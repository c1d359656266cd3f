"""Which tests are slow: `make test` leaves them out, `make test-slow` runs only them and
`make test-all` runs everything.

Tests whose files mark themselves ``@pytest.mark.slow`` (the wheel in a fresh venv, the browser, the
hub, re-execution in place, the student edition under nbval, huge shapes on the GPU) are slow
already; the node ids below (fnmatch patterns from the repository root) join them, so that no test
file has to change. A test belongs here when it runs the course end to end (a whole site, every
lesson) or takes more than a few seconds on a 2-core machine; `pytest --durations=30` says which.
"""
import fnmatch

import pytest

SLOW = {
    "tests/test_student.py::test_progress_prints_one_line_per_exercise_and_a_total":
        "runs the progress report over every lesson's student edition (17 s on 2 cores)",
    "tests/test_site.py::*": "builds the static site from every lesson",
    "tests/test_lab_kernels.py::test_a_lab_variant_builds_for_sm_90[[]*]":
        "builds the lab's v8 and v9 around a copy of v7 (40 s on 2 cores)",
    # make test keeps sm_75, sm_80 and sm_90 ("[[]" is fnmatch's literal "[")
    **{f"tests/test_build.py::test_every_*[[]*-{arch}]":
       "nvcc for every kernel file and rung on one more arch (about 15 s cold on 2 cores)"
       for arch in ("sm_86", "sm_89", "sm_100", "sm_120")},
}


@pytest.hookimpl(tryfirst=True)  # before `-m "not slow"` deselects by marker
def pytest_collection_modifyitems(items):
    for item in items:
        if any(fnmatch.fnmatchcase(item.nodeid, pattern) for pattern in SLOW):
            item.add_marker(pytest.mark.slow)
