"""environment.yml against what conda-forge actually builds (packaging/conda-forge.md, read from the
feedstocks' recipes: no conda channel is reachable here, so the facts are recorded, and held to)."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FACTS = ROOT / "packaging" / "conda-forge.md"


def _facts() -> dict:
    rows = {}
    for line in FACTS.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 6 or cells[0] in ("conda package", "---"):
            continue
        name, pip_name, version, pin, entry, recipe = cells
        rows[name] = dict(pip=pip_name, version=version, pin=pin, entry=entry, recipe=recipe)
    assert rows, f"no table in {FACTS}"
    return rows


def _environment() -> list[str]:
    entries, inside = [], False
    for line in (ROOT / "environment.yml").read_text().splitlines():
        if re.match(r"^dependencies:\s*$", line):
            inside = True
            continue
        if inside:
            if re.match(r"^\S", line):
                break
            m = re.match(r"^\s+-\s+([^#\s]+)", line)
            if m:
                entries.append(m.group(1))
    return entries


def _name(entry: str) -> str:
    return re.match(r"[A-Za-z0-9_.-]+?(?=[<>=!~ ]|$)", entry).group(0)


def test_every_environment_entry_is_in_the_facts_table_verbatim():
    facts = _facts()
    env = _environment()
    for entry in env:
        name = _name(entry)
        assert name in facts, \
            f"environment.yml lists {name}, which packaging/conda-forge.md does not describe"
        assert facts[name]["entry"] == entry, (
            f"environment.yml has {entry!r}; "
            f"packaging/conda-forge.md says {facts[name]['entry']!r}")
    assert {_name(e) for e in env} == set(facts), \
        "the table and environment.yml list different packages"


def test_every_cuda_package_is_pinned_to_the_release_pycuda_is_built_for():
    facts = _facts()
    built = re.search(r"cuda_compiler_version (\d+\.\d+)", facts["pycuda"]["pin"])
    assert built, facts["pycuda"]["pin"]
    release = built.group(1)
    upper = re.search(r"cuda-version >=[\d.]+,<(\d+)", facts["pycuda"]["pin"]).group(1)
    for entry in _environment():
        name = _name(entry)
        if name in ("cuda-version", "cuda-nvcc", "cuda-nvdisasm"):
            assert entry == f"{name}={release}", \
                f"{entry}: conda-forge's pycuda is built for CUDA {release}"
    assert int(release.split(".")[0]) < int(upper)
    # cuda-pathfinder accepts that release
    lo, hi = re.search(r"cuda-version >=(\d+)[\d.]*,<(\d+)",
                       facts["cuda-pathfinder"]["pin"]).groups()
    assert int(lo) <= int(release.split(".")[0]) < int(hi)


def test_the_python_playwright_is_playwright_python():
    names = {_name(e) for e in _environment()}
    # conda-forge's playwright: Node CLI
    assert "playwright-python" in names and "playwright" not in names


def test_sass_tools_are_listed():
    names = {_name(e) for e in _environment()}
    assert "cuda-nvdisasm" in names


def test_every_row_names_the_recipe_read_or_why_not():
    for name, row in _facts().items():
        recipe = row["recipe"]
        from_recipe = recipe.startswith("conda-forge/") \
            and re.search(r"recipe/(meta|recipe)\.yaml", recipe)
        assert from_recipe or recipe.startswith("not read: "), f"{name}: {recipe!r}"
        if recipe.startswith("conda-forge/"):
            assert row["version"] != "-", f"{name}: a recipe was read, so its version is known"
