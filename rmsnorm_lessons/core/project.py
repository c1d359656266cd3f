"""The project's public addresses, built from one place: ``Repository`` in pyproject.toml's
``[project.urls]`` (read from the checkout's pyproject.toml, else from the installed package's
metadata). The README's and lesson 00's Colab and Binder badges, the site and the Colab set-up lines
are made here.

    >>> from rmsnorm_lessons import project
    >>> project.colab_url("00_setup")   # doctest: +SKIP
    'https://colab.research.google.com/github/<owner>/<name>/blob/main/student/00_setup.ipynb'
"""
from __future__ import annotations

import functools
import re
from pathlib import Path

DISTRIBUTION = "rmsnorm-lessons"
BRANCH = "main"
#: where each edition of the lessons lives in the repository: the learner's (written by
#: ``python -m rmsnorm_lessons student``, what every Colab and Binder link opens) and the
#: instructor's (solutions in)
EDITIONS = {"student": "student", "instructor": "notebooks"}
PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
_GITHUB = re.compile(r"https://github\.com/([A-Za-z0-9][\w.-]*)/([\w.-]+?)(?:\.git)?/?")


def _from_pyproject(path: Path) -> str | None:
    try:
        import tomllib
    except ImportError:  # Python 3.10: the one line is read as it is written
        m = re.search(r'^\[project\.urls\][^\[]*?^Repository\s*=\s*"([^"]+)"', path.read_text(),
                      re.M | re.S)
        return m.group(1) if m else None
    return tomllib.loads(path.read_text()).get("project", {}).get("urls", {}).get("Repository")


def _from_metadata() -> str | None:
    from importlib import metadata

    try:
        urls = metadata.metadata(DISTRIBUTION).get_all("Project-URL") or []
    except metadata.PackageNotFoundError:
        return None
    found = [u.split(",", 1)[1].strip() for u in urls if u.split(",", 1)[0].strip() == "Repository"]
    return found[0] if found else None


@functools.lru_cache(maxsize=None)
def repository_url() -> str:
    """``https://github.com/<owner>/<name>``: pyproject.toml's ``[project.urls] Repository``."""
    url = _from_pyproject(PYPROJECT) if PYPROJECT.is_file() else None
    url = url or _from_metadata()
    if url is None:
        raise RuntimeError(f"no Repository in [project.urls]: neither {PYPROJECT} nor the "
                           f"installed {DISTRIBUTION}'s metadata has one")
    if not _GITHUB.fullmatch(url):
        raise ValueError(f"[project.urls] Repository must be https://github.com/<owner>/<name>, "
                         f"got {url!r}")
    return url.rstrip("/").removesuffix(".git")


def repository_path() -> str:
    """``<owner>/<name>`` of :func:`repository_url`."""
    m = _GITHUB.fullmatch(repository_url())
    return f"{m.group(1)}/{m.group(2)}"


def checkout_name() -> str:
    """The folder ``git clone`` makes: the repository's name."""
    return repository_path().split("/")[1]


def _notebook(stem: str) -> str:
    if not isinstance(stem, str) or not re.fullmatch(r"[\w-]+(\.ipynb)?", stem):
        raise ValueError(f"stem must be a lesson's file name such as '00_setup', got {stem!r}")
    return stem if stem.endswith(".ipynb") else f"{stem}.ipynb"


def _folder(edition: str) -> str:
    if edition not in EDITIONS:
        raise ValueError(f"edition must be one of {', '.join(EDITIONS)}, got {edition!r}")
    return EDITIONS[edition]


def colab_url(stem: str, edition: str = "student") -> str:
    """Colab's link that opens lesson ``stem`` of the repository, in its learner's edition
    (``student/``) or, ``edition="instructor"``, with the solutions (``notebooks/``)."""
    file, folder = _notebook(stem), _folder(edition)
    return (f"https://colab.research.google.com/github/{repository_path()}/blob/{BRANCH}/"
            f"{folder}/{file}")


def binder_url(stem: str = "00_setup", edition: str = "student") -> str:
    """Binder's link that builds the repository (binder/) and opens lesson ``stem`` in that
    edition."""
    file, folder = _notebook(stem), _folder(edition)
    return f"https://mybinder.org/v2/gh/{repository_path()}/{BRANCH}?labpath={folder}/{file}"


def file_url(path: str) -> str:
    """GitHub's page of ``path`` (relative to the repository's root) on the branch the links
    open: ``file_url("notebooks/02_naive.ipynb")``, the instructor's edition of lesson 02."""
    if not isinstance(path, str) or not path or path.startswith("/") or ".." in path.split("/"):
        raise ValueError(f"path must be a file of the repository, relative to its root, got "
                         f"{path!r}")
    return f"{repository_url()}/blob/{BRANCH}/{path}"
