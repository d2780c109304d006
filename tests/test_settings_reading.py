"""How the core reads its settings (DEVELOPERS.md, Settings): a component is given a typed
``HarvesterSettings``; only entry points call ``get_settings()``, so no ``settings or get_settings()``
fallback hides which settings a component runs with, and no ``getattr(settings, name, default)`` repeats a
default that lives in the model."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from harvester.settings import REPOSITORY_ROOT

pytestmark = pytest.mark.unit

PACKAGE = REPOSITORY_ROOT / "include" / "harvester"


def hidden_settings(package: Path) -> list[str]:
    """Every ``<x> or get_settings()`` and ``getattr(settings, ...)`` in the package, as ``file:line``."""
    found: list[str] = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            fallback = (isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or)
                        and any(isinstance(value, ast.Call) and isinstance(value.func, ast.Name)
                                and value.func.id == "get_settings" for value in node.values))
            # a setting named in the code and read with a default of its own (a name built at run time, as a
            # source file's ${HARVESTER_X} placeholder, is a lookup, not a second default)
            lookup = (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
                      and len(node.args) == 3 and isinstance(node.args[0], ast.Name) and node.args[0].id == "settings"
                      and isinstance(node.args[1], ast.Constant))
            if fallback or lookup:
                found.append(f"{path.relative_to(package.parent)}:{node.lineno}")
    return found


def test_no_component_falls_back_to_get_settings() -> None:
    assert hidden_settings(PACKAGE) == []


def test_the_check_sees_a_fallback_and_a_getattr(tmp_path: Path) -> None:
    (tmp_path / "component.py").write_text(
        "def build(settings=None):\n    settings = settings or get_settings()\n"
        "    return getattr(settings, 'lease_seconds', 120.0)\n")
    assert hidden_settings(tmp_path) == [f"{tmp_path.name}/component.py:2", f"{tmp_path.name}/component.py:3"]
