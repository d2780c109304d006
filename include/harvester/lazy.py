"""Lazy faces: a component's ``__init__`` that names its exports in ordinary import statements, loaded on
first use.

A face whose plain imports would cost a DAG parse or a short command something measurable (pymongo,
prometheus-client, Playwright, Celery) writes its imports under ``if TYPE_CHECKING:`` and ends with
``__getattr__, __dir__ = lazy_face(__name__)``. The imports stay ordinary statements, so a type checker,
an editor and a generic import reader (import-linter, ``tests/test_layering.py``) see exactly what the
face exports and where from; :func:`lazy_face` reads the same statements from the file and imports a
name's module only when the name is first asked for.
"""

from __future__ import annotations

import ast
import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["lazy_face"]


def _type_checking_imports(path: Path) -> dict[str, tuple[str, str]]:
    """``exported name -> (module, name in module)`` from the module's ``if TYPE_CHECKING:`` block."""
    exports: dict[str, tuple[str, str]] = {}
    for node in ast.parse(path.read_text(encoding="utf-8"), str(path)).body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for statement in node.body:
                if isinstance(statement, ast.ImportFrom) and statement.module and statement.level == 0:
                    for alias in statement.names:
                        exports[alias.asname or alias.name] = (statement.module, alias.name)
    return exports


def lazy_face(module_name: str) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of a lazy face (see the module docstring)."""
    module = sys.modules[module_name]
    exports = _type_checking_imports(Path(module.__file__ or ""))

    def __getattr__(name: str) -> Any:
        if name not in exports:
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        source, original = exports[name]
        value = getattr(importlib.import_module(source), original)
        setattr(module, name, value)  # the next lookup is a plain attribute
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(module), *exports})

    return __getattr__, __dir__
