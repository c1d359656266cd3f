"""The package's import graph (read with ``ast``, no module imported): no cycles, no shadowed stdlib
names, and imports that run one way through the wings (``rmsnorm_lessons.WINGS``), from the course
down to the core.

Every ``import``/``from ... import`` counts, wherever it stands (top of the module or inside a
function), relative or absolute, so a cycle hidden behind an import inside a function is found too.
"""
import ast
import sys
from pathlib import Path

import pytest

PACKAGE = "rmsnorm_lessons"
# read as text, not imported: the package's own list of its wings, lowest first
WINGS = ast.literal_eval(next(
    node.value for node in ast.parse((Path(__file__).resolve().parent.parent / PACKAGE /
                                      "__init__.py").read_text()).body
    if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "WINGS"))
ROOT = Path(__file__).resolve().parent.parent / PACKAGE


def _modules() -> dict:
    """``{dotted module name: (path, is_package)}`` of every .py file of the package."""
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        is_package = parts[-1] == "__init__"
        name = ".".join(parts[:-1] if is_package else parts)
        found[name] = (path, is_package)
    return found


MODULES = _modules()


def _base(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute name a ``from X import ...`` reads from."""
    if node.level == 0:
        return node.module or ""
    # the importing module's package
    here = module.split(".") if is_package else module.split(".")[:-1]
    if node.level > 1:
        here = here[: len(here) - (node.level - 1)]
    return ".".join(here + ([node.module] if node.module else []))


def _inside(name: str) -> str | None:
    """``name`` or its nearest parent that is a module of the package (None outside the package)."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in MODULES:
            return candidate
        parts.pop()
    return None


def import_graph() -> dict:
    """``{module: {modules it imports}}`` within the package."""
    graph = {}
    for module, (path, is_package) in MODULES.items():
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _base(module, is_package, node)
                for alias in node.names:
                    # `from pkg import sub` imports the module pkg.sub; `from pkg import name` reads
                    # pkg
                    sub = f"{base}.{alias.name}"
                    targets.append(sub if sub in MODULES else base)
            for target in targets:
                inside = _inside(target)
                if inside is not None and inside != module:
                    edges.add(inside)
        graph[module] = edges
    return graph


def find_cycles(graph: dict) -> list:
    """Every strongly connected group of more than one module (Tarjan), each as a sorted list."""
    index, low, on_stack, stack, groups = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return groups


def _describe(group: list, graph: dict) -> str:
    edges = [f"{a} -> {b}" for a in group for b in sorted(graph[a]) if b in group]
    return "{" + ", ".join(group) + "}: " + "; ".join(edges)


def test_the_graph_sees_relative_absolute_and_function_level_imports():
    graph = import_graph()
    # `from . import ..., sass`
    assert f"{PACKAGE}.inspection.sass" in graph[f"{PACKAGE}.inspection.occupancy"]
    # `from ..inspection.access import ...`
    assert f"{PACKAGE}.inspection.access" in graph[f"{PACKAGE}.lessons.lesson02"]
    # `from ..course.verdict import Verdict, ...`
    assert f"{PACKAGE}.course.verdict" in graph[f"{PACKAGE}.lessons.lesson00"]
    # a cycle made of an import inside a function is found
    fake = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycles(fake) == [["a", "b", "c"]]


def test_no_import_cycles():
    graph = import_graph()
    cycles = find_cycles(graph)
    assert not cycles, \
        "import cycles in the package (every import counts, also inside functions):\n" + \
        "\n".join(_describe(c, graph) for c in cycles)


@pytest.mark.skipif(not hasattr(sys, "stdlib_module_names"),
                    reason="sys.stdlib_module_names is Python 3.10+")
def test_no_module_shadows_the_standard_library():
    shadowing = sorted(name for name in MODULES
                       if name != PACKAGE and name.rsplit(".", 1)[-1] in sys.stdlib_module_names)
    assert not shadowing, (f"these modules have the name of a standard-library module (inside the "
                           f"package "
                           f"`import {shadowing[0].rsplit('.', 1)[-1]}` would be ambiguous to "
                           f"readers and "
                           f"tools): {shadowing}")


def _tier(module: str) -> int | None:
    """The tier of ``module``'s wing in ``rmsnorm_lessons.WINGS`` (0: core); None for the modules at
    the top (the command line, the package's own ``__init__``), which may import anything."""
    parts = module.split(".")
    if len(parts) < 3 and not (len(parts) == 2 and (ROOT / parts[1]).is_dir()):
        return None
    for tier, wings in enumerate(WINGS):
        if parts[1] in wings:
            return tier
    raise AssertionError(f"{module} is in no wing of rmsnorm_lessons.WINGS")


def direction_breaks(graph: dict) -> list[str]:
    """Every import from a wing into a higher tier, or into another wing of the same tier."""
    breaks = []
    for module, targets in sorted(graph.items()):
        tier = _tier(module)
        for target in sorted(targets):
            other = _tier(target)
            if tier is None or other is None:
                if tier is not None:  # a wing reaching up to the command line or the top
                    breaks.append(f"{module} -> {target}")
                continue
            same_wing = module.split(".")[1] == target.split(".")[1]
            if other > tier or (other == tier and not same_wing):
                breaks.append(f"{module} -> {target}")
    return breaks


def test_every_folder_of_the_package_is_a_wing():
    folders = {p.name for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    assert folders - {w for wings in WINGS for w in wings} == set(), "add it to WINGS, in its tier"


def test_imports_run_one_way_from_the_course_down_to_the_core():
    breaks = direction_breaks(import_graph())
    assert not breaks, ("a lower wing imports a higher one (rmsnorm_lessons.WINGS gives the order; "
                        "pass what it needs in, or move the code up):\n" + "\n".join(breaks))


def test_the_direction_check_sees_a_wing_reaching_up():
    pkg = PACKAGE
    fake = {f"{pkg}.core.gpu": {f"{pkg}.course.notebook"},
            f"{pkg}.inspection.sass": {f"{pkg}.twin.runtime", f"{pkg}.core.build"},
            f"{pkg}.course.notebook": {f"{pkg}.core.gpu", f"{pkg}.course.verdict"},
            f"{pkg}.lessons.lesson04": {f"{pkg}.cli"}}
    assert direction_breaks(fake) == [f"{pkg}.core.gpu -> {pkg}.course.notebook",
                                      f"{pkg}.inspection.sass -> {pkg}.twin.runtime",
                                      f"{pkg}.lessons.lesson04 -> {pkg}.cli"]


def test_at_most_eight_modules_stand_at_the_top():
    top = sorted(p.name for p in ROOT.glob("*.py"))
    assert len(top) <= 8, top
