"""The package's layering, read from the source with ``ast`` (every import: top level, inside functions,
under TYPE_CHECKING): only ``harvester.airflow`` imports Airflow, components never import each other
in a circle, the leaf modules (settings, keys, queue names, the connection factory, the Redis-script
platform) import no component, so any component may use them, and no component takes its script
machinery from the distributor."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest
from harvester.settings import REPOSITORY_ROOT

pytestmark = pytest.mark.unit

PACKAGE = REPOSITORY_ROOT / "include" / "harvester"
AIRFLOW_ADAPTERS = "airflow"
LEAF_MODULES = {"lazy", "settings", "redis_keys", "queues", "connections", "errors", "urls", "patterns", "source_stats",
                "redis_scripts"}
# the `harvester` command lists every component's commands; `processes` composes those of several: nothing
# imports either
ENTRY_POINTS = {"cli", "processes"}
SCRIPT_MACHINERY = {"ScriptContract", "ScriptPipeline", "Scripts", "declare_script", "text", "optional_text",
                    "VARIADIC"}  # harvester.redis_scripts: every component registers its own scripts with it


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path) -> list[tuple[str, int]]:
    """Every module ``path`` imports, absolute (relative imports resolved), with its line."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[tuple[str, int]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            found.append((target, node.lineno))
            # `from harvester import storage` imports the sub-package storage
            found += [(f"{target}.{alias.name}", node.lineno) for alias in node.names if target == "harvester"]
    return found


def component_of(module: str) -> str | None:
    """The first sub-package (or top-level module) under harvester; None for the package itself."""
    parts = module.split(".")
    if parts[0] != "harvester" or len(parts) < 2:
        return None
    return parts[1]


def modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def component_graph() -> dict[str, dict[str, list[str]]]:
    """component -> imported component -> the ``file:line`` places that import it."""
    graph: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for path in modules():
        source = component_of(module_name(path))
        if source is None:
            continue
        for target_module, line in imported_modules(path):
            target = component_of(target_module)
            if target is not None and target != source:
                graph[source][target].append(f"{path.relative_to(REPOSITORY_ROOT)}:{line}")
    return graph


def module_graph() -> dict[str, dict[str, list[str]]]:
    """module -> imported module of the package -> the ``file:line`` places that import it. Every import counts
    (top level, inside a function, under TYPE_CHECKING): a circle through a function-level import still means
    neither module can be read, moved or tested without the other. ``from harvester.x import y`` names the
    module ``harvester.x.y`` where ``y`` is one (its package is only its parent, imported first by Python)."""
    known = {module_name(path) for path in modules()}
    graph: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for path in modules():
        source = module_name(path)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                targets = [f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in known else node.module
                           for alias in node.names]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                continue
            for target in targets:
                if target in known and target != source:
                    graph[source][target].append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    return graph


def find_cycles(graph: dict[str, dict[str, list[str]]]) -> list[list[str]]:
    """Every strongly connected group of more than one component (Tarjan), each as a sorted list."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in graph.get(node, {}):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted({*graph, *(target for targets in graph.values() for target in targets)}):
        if node not in index:
            visit(node)
    return groups


def test_only_the_airflow_adapters_import_airflow() -> None:
    stray = [
        f"{path.relative_to(REPOSITORY_ROOT)}:{line}: import {target}"
        for path in modules() if component_of(module_name(path)) != AIRFLOW_ADAPTERS
        for target, line in imported_modules(path) if target == "airflow" or target.startswith("airflow.")
    ]
    assert stray == [], "Airflow imported outside harvester/airflow/:\n" + "\n".join(stray)


def test_no_import_cycle_between_components() -> None:
    graph = component_graph()
    cycles = find_cycles(graph)
    detail = [
        f"{' <-> '.join(group)}: " + "; ".join(
            f"{source} -> {target} ({', '.join(graph[source][target][:3])})"
            for source in group for target in group if target in graph.get(source, {}))
        for group in cycles
    ]
    assert cycles == [], "import cycles between components:\n" + "\n".join(detail)


def test_no_two_modules_import_each_other_in_a_circle() -> None:
    """Not only components: no module of the package is in an import circle (a shared piece moves down into a
    module both can import)."""
    graph = module_graph()
    cycles = find_cycles(graph)
    detail = ["; ".join(f"{source} -> {target} ({graph[source][target][0]})"
                        for source in group for target in group if target in graph.get(source, {}))
              for group in cycles]
    assert cycles == [], "import circles between modules:\n" + "\n".join(detail)


def test_the_module_circle_check_sees_a_function_level_circle(tmp_path: Path) -> None:
    package = tmp_path / "harvester"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "handler.py").write_text("from harvester.codec import CODEC\n")
    (package / "codec.py").write_text("CODEC = 1\n\n\ndef later():\n    from harvester import handler\n")
    (package / "reader.py").write_text("from harvester.codec import CODEC\n")
    global PACKAGE
    saved, PACKAGE = PACKAGE, package
    try:
        assert find_cycles(module_graph()) == [["harvester.codec", "harvester.handler"]]
    finally:
        PACKAGE = saved


def test_leaf_modules_import_no_component() -> None:
    offending = [
        f"{leaf} -> {target} ({', '.join(places)})"
        for leaf in LEAF_MODULES & set(component_graph())
        for target, places in component_graph()[leaf].items() if target not in LEAF_MODULES
    ]
    assert offending == [], "leaf modules must not import components:\n" + "\n".join(offending)


def script_machinery_from_the_distributor(path: Path) -> list[tuple[int, str]]:
    """(line, import) of each import of script machinery (or of the distributor's script module) by ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("harvester.distributor"):
            names = {alias.name for alias in node.names}
            if node.module == "harvester.distributor.scripts" or names & SCRIPT_MACHINERY:
                found.append((node.lineno, f"from {node.module} import {', '.join(sorted(names))}"))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, f"import {alias.name}") for alias in node.names
                      if alias.name == "harvester.distributor.scripts"]
    return found


def test_no_component_imports_the_distributor_for_script_machinery() -> None:
    """Each component owns its Lua and its contracts and registers them with ``harvester.redis_scripts``."""
    stray = [f"{path.relative_to(REPOSITORY_ROOT)}:{line}: {text}" for path in modules()
             if component_of(module_name(path)) != "distributor"
             for line, text in script_machinery_from_the_distributor(path)]
    assert stray == [], "script machinery imported from the distributor:\n" + "\n".join(stray)
    import harvester.distributor

    assert not SCRIPT_MACHINERY & set(harvester.distributor.__all__), "the distributor re-exports script machinery"


def test_the_script_check_sees_a_component_borrowing_the_distributor_s_machinery(tmp_path: Path) -> None:
    module = tmp_path / "probe.py"
    module.write_text("def later():\n    from harvester.distributor import Scripts, TaskMessage\n"
                      "from harvester.distributor.scripts import CONTRACTS\nfrom harvester.distributor import Intake\n"
                      "import harvester.distributor.scripts\n")
    assert sorted(line for line, _ in script_machinery_from_the_distributor(module)) == [2, 3, 5]


def test_every_top_level_module_is_classified() -> None:
    """A new top-level module is either a leaf (imports no component) or an entry point, decided on purpose."""
    top_level = {path.stem for path in PACKAGE.glob("*.py") if path.name != "__init__.py"}
    assert top_level - LEAF_MODULES - ENTRY_POINTS == set()


def test_the_demo_site_is_a_package_of_its_own() -> None:
    """The demo target site lives beside the core (demo/harvester_demo), which production images install
    alone: no component of harvester is the demo, the core never imports it, and it imports nothing of the core."""
    assert not (PACKAGE / "demo_site").exists()
    core = [f"{path.relative_to(REPOSITORY_ROOT)}:{line}" for path in modules()
            for target, line in imported_modules(path) if target.split(".")[0] == "harvester_demo"]
    assert core == [], "the core imports the demo package:\n" + "\n".join(core)
    demo_files = sorted((REPOSITORY_ROOT / "demo" / "harvester_demo").rglob("*.py"))
    assert demo_files
    demo = [f"{path.relative_to(REPOSITORY_ROOT)}:{node.lineno}" for path in demo_files
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.Import | ast.ImportFrom)
            and any(name.split(".")[0] == "harvester" for name in (
                [alias.name for alias in node.names] if isinstance(node, ast.Import) else [node.module or ""]))]
    assert demo == [], "the demo package imports the core:\n" + "\n".join(demo)


def test_the_checks_see_function_level_imports_and_cycles(tmp_path: Path) -> None:
    """The helpers themselves: an import inside a function is found, and a two-component loop is a cycle."""
    module = tmp_path / "probe.py"
    module.write_text("def later():\n    from harvester.workers import batch\n    import airflow.sdk\n")
    global PACKAGE
    saved, PACKAGE = PACKAGE, tmp_path
    try:
        assert [target for target, _ in imported_modules(module)] == ["harvester.workers", "airflow.sdk"]
    finally:
        PACKAGE = saved
    assert find_cycles({"a": {"b": ["x"]}, "b": {"c": ["y"]}, "c": {"a": ["z"]}, "d": {"a": ["w"]}}) == [
        ["a", "b", "c"]]
    assert find_cycles({"a": {"b": ["x"]}}) == []
