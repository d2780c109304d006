"""Each component's ``__init__`` declares its public surface (``__all__``), and the others use only that."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import subprocess
import sys

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


def test_components_use_only_each_other_s_surface():
    strays = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).parts
        own = parts[0] if len(parts) > 1 else None
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module):
                continue
            module = node.module.split(".")
            if module[0] != "harvester" or len(module) < 2 or module[1] not in COMPONENTS or module[1] == own:
                continue
            if len(module) > 2 and is_airflow_adapter(node.module):
                continue
            surface = importlib.import_module(f"harvester.{module[1]}").__all__
            strays += [f"{path.relative_to(PACKAGE)}: {node.module}.{alias.name}" for alias in node.names
                       if alias.name not in surface and not (len(module) == 2 and alias.name.islower()
                                                             and (PACKAGE / module[1] / f"{alias.name}.py").exists())]
    assert strays == []


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
