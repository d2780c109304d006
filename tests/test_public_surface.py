"""Each component's ``__init__`` declares its public surface (``__all__``), and the others use only that."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from harvester.settings import REPOSITORY_ROOT

pytestmark = pytest.mark.unit

PACKAGE = REPOSITORY_ROOT / "include" / "harvester"
COMPONENTS = sorted(path.parent.name for path in PACKAGE.glob("*/__init__.py"))


def is_airflow_adapter(module: str) -> bool:
    """Adapters (the only modules importing Airflow) are wired to each other, not part of a surface."""
    path = PACKAGE.joinpath(*module.split(".")[1:]).with_suffix(".py")
    if not path.exists():
        return False
    imported: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            imported.add(node.module.split(".")[0])
    return "airflow" in imported


@pytest.mark.parametrize("component", COMPONENTS)
def test_every_component_declares_a_surface_that_resolves(component: str):
    package = importlib.import_module(f"harvester.{component}")
    assert isinstance(package.__all__, list) and package.__all__, component
    assert len(set(package.__all__)) == len(package.__all__)
    for name in package.__all__:
        assert getattr(package, name) is not None, f"harvester.{component}.{name}"


ENTRY_POINT_IMPORTS = {"harvester.cli"}  # the `harvester` command imports each component's ``commands`` module


def cross_component_imports(path: Path) -> list[tuple[int, str, list[str]]]:
    """(line, module, names) of every import of another component by ``path`` (any depth, any form)."""
    parts = path.relative_to(PACKAGE).parts
    own = parts[0] if len(parts) > 1 else None
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules, names = [node.module], [alias.name for alias in node.names]
        elif isinstance(node, ast.Import):
            modules, names = [alias.name for alias in node.names], []
        else:
            continue
        for module in modules:
            split = module.split(".")
            if split[0] == "harvester" and len(split) > 1 and split[1] in COMPONENTS and split[1] != own:
                found.append((node.lineno, module, names))
    return found


def test_components_import_each_other_only_through_their_faces():
    """``from harvester.storage import PackageStore``, never ``harvester.storage.packages``: a component's
    modules are its own, and its face (``__init__``, ``__all__``) is all another component may use."""
    strays = []
    for path in sorted(PACKAGE.rglob("*.py")):
        entry_point = module_name(path) in ENTRY_POINT_IMPORTS
        for line, module, names in cross_component_imports(path):
            where = f"{path.relative_to(PACKAGE)}:{line}"
            if module.count(".") > 1:
                strays.append(f"{where}: imports {module} (a module inside the component, not its face)")
                continue
            surface = importlib.import_module(module).__all__
            strays += [f"{where}: {module}.{name} is not on the face" for name in names
                       if name not in surface and not (entry_point and name in {"commands", "suggest"})]
    assert strays == []


def test_the_face_check_sees_a_submodule_import(tmp_path: Path):
    probe = PACKAGE / "workers" / "probe_for_the_face_check.py"
    try:
        probe.write_text("def later():\n    from harvester.storage.packages import PackageStore\n"
                         "import harvester.scraping.discovery.links\nfrom harvester.storage import PackageStore\n")
        assert sorted((line, module) for line, module, _ in cross_component_imports(probe)) == [
            (2, "harvester.storage.packages"), (3, "harvester.scraping.discovery.links"), (4, "harvester.storage")]
    finally:
        probe.unlink()


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_every_face_is_plain_or_lazy_through_one_helper():
    """A face imports its names in ordinary statements (plain, or under TYPE_CHECKING read by
    ``harvester.lazy.lazy_face``), so a generic import reader sees them; ``__all__`` is exactly those names."""
    for component in COMPONENTS:
        init = PACKAGE / component / "__init__.py"
        tree = ast.parse(init.read_text())
        imported = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("harvester."):
                imported |= {alias.asname or alias.name for alias in node.names}
        exported = set(importlib.import_module(f"harvester.{component}").__all__)
        assert exported <= imported, (component, sorted(exported - imported))
        assert "importlib" not in init.read_text(), component


def is_submodule(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # the parent is a module, not a package
        return False


def test_every_harvester_import_resolves():
    """Imports inside functions fail only when they run: a module that moved must not leave one behind."""
    broken = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("harvester"):
                try:
                    module = importlib.import_module(node.module)
                except ImportError as error:
                    broken.append(f"{path.relative_to(PACKAGE)}: {node.module} ({error})")
                    continue
                broken += [f"{path.relative_to(PACKAGE)}: {node.module}.{alias.name}" for alias in node.names
                           if not hasattr(module, alias.name) and not is_submodule(f"{node.module}.{alias.name}")]
    assert broken == []


def test_importing_the_components_loads_no_heavy_client():
    """The DAG file's parse imports harvester.producer and harvester.services: they must stay cheap."""
    probe = ("import sys, harvester.producer, harvester.services, harvester.storage, harvester.scraping, "
             "harvester.pageslots, harvester.workers; "
             "print(sorted({'pymongo', 'playwright', 'celery', 'httpx'} & set(sys.modules)))")
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True).stdout.strip() == "[]"
