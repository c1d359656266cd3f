"""Packaging (CPU): environment.yml agrees with pyproject.toml; README, .ci/run and the Makefile
agree."""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

# conda-only entries: the interpreter, pip, and the CUDA compiler that pip users get from NVIDIA's
# wheels (tools/setup-venv.sh installs nvidia-cuda-nvcc and friends where no nvcc is found)
CONDA_ONLY = {"python", "pip", "cuda-nvcc", "cuda-version"}
# the same package under another name on conda-forge (PyPI name -> conda name)
CONDA_NAME = {"playwright": "playwright-python",  # conda-forge's `playwright` is the Node.js CLI
              "nvidia-cuda-nvdisasm": "cuda-nvdisasm"}  # NVIDIA's wheel, conda-forge's package
# pinned otherwise on purpose: conda users get the CUDA 12.9 toolchain (conda-forge's PyCUDA is
# built for it: packaging/conda-forge.md), pip users NVIDIA's 13.x wheels
CONDA_PIN = {"cuda-nvdisasm": (">=13.0,<14", "=12.9")}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _split(requirement: str):
    m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*(.*)$", requirement)
    assert m, requirement
    return _norm(m.group(1)), m.group(3).replace(" ", "").split(";")[0]


def _pyproject():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _pip_requirements() -> dict:
    project = _pyproject()["project"]
    reqs = list(project["dependencies"])
    for extra in project.get("optional-dependencies", {}).values():
        reqs += extra
    out = {}
    for r in reqs:
        name, spec = _split(r)
        name = CONDA_NAME.get(name, name)
        assert out.get(name,
                       spec) == spec, (f"{name} is pinned two ways in pyproject.toml: {out[name]} "
                                       f"and {spec}")
        out[name] = spec
    return out


def _conda_requirements() -> dict:
    lines = (ROOT / "environment.yml").read_text().splitlines()
    out, inside = {}, False
    for line in lines:
        if re.match(r"^dependencies:\s*$", line):
            inside = True
            continue
        if inside:
            if re.match(r"^\S", line):  # the next top-level key
                break
            m = re.match(r"^\s+-\s+([^#\s]+)", line)
            if m:
                name, spec = _split(m.group(1))
                out[name] = spec
    assert out, "environment.yml has no dependencies list"
    return out


def test_environment_yml_lists_the_same_packages_as_pyproject():
    pip, conda = _pip_requirements(), _conda_requirements()
    conda_packages = {k: v for k, v in conda.items() if k not in CONDA_ONLY}
    missing = sorted(set(pip) - set(conda_packages))
    extra = sorted(set(conda_packages) - set(pip))
    assert not missing, f"in pyproject.toml but not in environment.yml: {missing}"
    assert not extra, f"in environment.yml but not in pyproject.toml: {extra}"
    differ = {k: (pip[k], conda[k]) for k in pip
              if pip[k] != conda[k] and CONDA_PIN.get(k) != (pip[k], conda[k])}
    assert not differ, f"version bounds differ (pyproject, environment.yml): {differ}"


def test_environment_yml_brings_a_cuda_compiler_and_python():
    conda = _conda_requirements()
    assert "cuda-nvcc" in conda and "python" in conda
    requires = _pyproject()["project"]["requires-python"]
    assert conda["python"] == requires


def test_the_gpu_extra_is_pycuda():
    extras = _pyproject()["project"]["optional-dependencies"]
    assert [_split(r)[0] for r in extras["gpu"]] == ["pycuda"]
    assert {"pytest", "nbval"} <= {_split(r)[0] for r in extras["test"]}


def _make_recipe(target: str) -> list[str]:
    lines = (ROOT / "Makefile").read_text().splitlines()
    for i, line in enumerate(lines):
        if re.match(rf"^{re.escape(target)}\s*:", line):
            recipe = []
            for follow in lines[i + 1:]:
                if not follow.startswith("\t"):
                    break
                recipe.append(follow.strip())
            return recipe
    raise AssertionError(f"the Makefile has no {target!r} target")


def test_make_test_runs_pytest_on_tests_and_notebooks():
    recipe = " ".join(_make_recipe("test"))
    assert re.search(r"-m pytest\b", recipe), recipe
    assert "--nbval" in recipe.split() and "--nbval-lax" not in recipe  # strict
    assert "--nbval-sanitize-with nbval_sanitize.cfg" in recipe
    assert "tests" in recipe.split() and "notebooks" in recipe.split()
    assert re.match(r"^test:\s*venv\b", next(l for l in (ROOT / "Makefile").read_text().splitlines()
                                                if l.startswith("test:")))


def test_ci_runs_make_test():
    run = (ROOT / ".ci" / "run").read_text()
    commands = [l.strip() for l in run.splitlines() if l.strip() and not l.strip().startswith("#")]
    assert "make test" in commands, commands


def test_readme_gives_make_test():
    readme = ROOT / "README.md"
    if not readme.exists():
        pytest.skip("README.md is not written yet")
    assert re.search(r"(?m)^\s*(\$\s*)?make test\b",
                     readme.read_text()), "README.md does not show `make test`"


def test_makefile_has_a_sanitize_target():
    recipe = " ".join(_make_recipe("sanitize"))
    assert "tools/sanitize.py" in recipe


def test_every_package_folder_is_in_the_wheel_list():
    # setuptools cannot combine `packages.find` with the kernels/ mapping, so pyproject lists the
    # packages: a new subpackage must be added there (tests/test_wheel.py checks the built wheel)
    setuptools = _pyproject()["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts)
             for p in (ROOT / "rmsnorm_lessons").rglob("__init__.py")
             if "__pycache__" not in p.parts}
    assert found <= listed, (f"packages with an __init__.py missing from pyproject's packages: "
                             f"{sorted(found - listed)}")
    assert setuptools["package-dir"]["rmsnorm_lessons.kernel_sources"] == "kernels"
    assert "rmsnorm_lessons.kernel_sources" in listed
    assert set(setuptools["package-data"]["rmsnorm_lessons.kernel_sources"]) >= {"*.cu", "*.cuh"}


def test_license_is_spdx_and_shipped():
    project = _pyproject()["project"]
    assert project["license"] == "MIT AND CC-BY-4.0"
    assert project["license-files"] == ["LICENSE"] and (ROOT / "LICENSE").is_file()
    assert "SPDX-License-Identifier: MIT AND CC-BY-4.0" in (ROOT / "LICENSE").read_text()


def test_colab_links_are_rendered_from_the_one_address():
    import subprocess
    import sys

    p = subprocess.run([sys.executable, str(ROOT / "tools" / "colab_links.py"), "--check"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, f"{p.stderr}run python3 tools/colab_links.py"


def test_binder_config_installs_the_package():
    import os

    postbuild = ROOT / "binder" / "postBuild"
    assert os.access(postbuild, os.X_OK), "binder/postBuild must be executable"
    assert (postbuild.read_text().startswith("#!")
            and "pip install --no-deps -e ." in postbuild.read_text())
    assert re.fullmatch(r"python-3\.\d+\s*", (ROOT / "binder" / "runtime.txt").read_text())
    reqs = {}
    for line in (ROOT / "binder" / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, spec = _split(line)
            reqs[name] = spec
    runtime = dict(_split(r) for r in _pyproject()["project"]["dependencies"])
    for name, spec in runtime.items():
        assert reqs.get(name) == spec, (f"binder/requirements.txt: {name}{spec} (as in "
                                        f"pyproject.toml)")
    assert "jupyterlab" in reqs and "ipywidgets" in reqs and "nvidia-cuda-nvcc" in reqs
