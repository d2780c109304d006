"""include/pyproject.toml declares every third-party import of the package, and nothing it does not import."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from functools import cache
from importlib.metadata import distribution, packages_distributions
from pathlib import Path

import pytest
from harvester.settings import REPOSITORY_ROOT

pytestmark = pytest.mark.unit

PACKAGE = REPOSITORY_ROOT / "include" / "harvester"
PROJECT = tomllib.loads((REPOSITORY_ROOT / "include" / "pyproject.toml").read_text())["project"]
OPTIONAL = frozenset({"uvloop"})  # imported under `except ImportError` with a fallback


def normalised(requirement: str) -> str:
    """PEP 503 name of a requirement string ("celery[redis]" -> "celery", "PyYAML" -> "pyyaml")."""
    return re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9._-]+", requirement).group(0)).lower()


DEPENDENCIES = {normalised(requirement) for requirement in PROJECT["dependencies"]}
EXTRAS = {name: {normalised(requirement) for requirement in requirements}
          for name, requirements in PROJECT["optional-dependencies"].items()}
AIRFLOW_EXTRA = EXTRAS["airflow"]
# the users of the cluster extra: the compose topology's secrets and its PostgreSQL
CLUSTER_MODULES = {PACKAGE / "services" / "cluster.py", PACKAGE / "services" / "postgres.py"}
PARQUET_MODULES = {PACKAGE / "storage" / "exports.py"}  # the parquet extra: pyarrow, imported when writing Parquet


def third_party_imports(path: Path, own: str = "harvester") -> set[str]:
    """Absolute imports (top level or inside functions) that are neither the standard library nor ``own``."""
    modules: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            modules |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules.add(node.module)
    return {module for module in modules
            if module.split(".")[0] not in sys.stdlib_module_names and module.split(".")[0] != own}


@cache
def distributions_of(top_level: str) -> tuple[str, ...]:
    return tuple(packages_distributions().get(top_level, ()))


@cache
def files_of(name: str) -> frozenset[str]:
    return frozenset(str(file) for file in distribution(name).files or ())


@cache
def owners(module: str) -> frozenset[str]:
    """The installed distributions that ship ``module`` (airflow.sdk and airflow.providers.mongo differ)."""
    candidates = distributions_of(module.split(".")[0])
    stem = module.replace(".", "/")
    shipping = {name for name in candidates
                if {f"{stem}.py", f"{stem}/__init__.py"} & files_of(name)
                or any(file.startswith(f"{stem}.") and file.endswith((".so", ".pyd")) for file in files_of(name))}
    return frozenset(normalised(name) for name in (shipping or candidates))


@pytest.fixture(scope="module")
def imports_by_file() -> dict[Path, set[str]]:
    """Module-scoped, so the file is one xdist work unit and the installed distributions' file lists (seconds to
    read, Airflow alone ships thousands) are read once, not once per worker."""
    return {path: third_party_imports(path) for path in sorted(PACKAGE.rglob("*.py"))}


def test_every_third_party_import_is_declared(imports_by_file):
    missing = []
    for path, modules in imports_by_file.items():
        adapter = any(module.split(".")[0] == "airflow" for module in modules)  # an Airflow adapter module
        declared = DEPENDENCIES | (AIRFLOW_EXTRA if adapter else set()) | (EXTRAS["cluster"] if path in CLUSTER_MODULES
                                                                             else set())
        declared |= EXTRAS["parquet"] if path in PARQUET_MODULES else set()
        for module in sorted(modules):
            if module.split(".")[0] in OPTIONAL:
                continue
            found = owners(module)
            assert found, f"{module} (imported by {path}) is not installed at all"
            if not found & declared:
                missing.append(f"{path.relative_to(PACKAGE)}: {module} ({' or '.join(sorted(found))})")
    assert missing == []


def test_every_declared_dependency_is_imported(imports_by_file):
    imported: set[str] = set()
    for modules in imports_by_file.values():
        for module in modules:
            imported |= owners(module)
    declared = DEPENDENCIES.union(*EXTRAS.values())
    assert sorted(declared - imported - {"apache-airflow"}) == []


def test_the_airflow_extra_is_only_for_airflow_adapters(imports_by_file):
    """Outside the adapters nothing may need a distribution that only the airflow extra brings."""
    only_extra = AIRFLOW_EXTRA - DEPENDENCIES
    for path, modules in imports_by_file.items():
        if any(module.split(".")[0] == "airflow" for module in modules):
            continue
        for module in modules:
            assert not owners(module) <= only_extra, f"{path} imports {module}, declared only in the airflow extra"


def test_kombu_is_new_enough_for_producer_batch():
    assert "kombu>=5.7" in [requirement.split("#")[0].strip() for requirement in PROJECT["dependencies"]]
    from kombu import Producer

    assert hasattr(Producer, "batch")


def test_the_demo_package_declares_exactly_what_it_imports():
    """demo/pyproject.toml, like the core's: every third-party import declared, nothing declared unused."""
    project = tomllib.loads((REPOSITORY_ROOT / "demo" / "pyproject.toml").read_text())["project"]
    declared = {normalised(requirement) for requirement in project["dependencies"]}
    imported: set[str] = set()
    for path in sorted((REPOSITORY_ROOT / "demo" / "harvester_demo").rglob("*.py")):
        for module in third_party_imports(path, own="harvester_demo"):
            found = owners(module)
            assert found & declared, f"{path.name}: {module} ({' or '.join(sorted(found))}) is not declared"
            imported |= found
    assert sorted(declared - imported) == []
