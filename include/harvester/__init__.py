"""Harvester: harvest structured data from many websites on a schedule.

The package is the installable core shared by the DAG files, the Celery workers, the distributor
service, the Airflow plugin and the tests. Nothing here imports Airflow except the Airflow
adapters in ``harvester.airflow`` (tests/test_layering.py checks it).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__version__ = "0.1.0"
__all__ = ["__version__"]


def lazy_exports(package: str, exports: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that loads ``name`` from ``package.<exports[name]>`` on first use.

    Components whose modules pull in heavy clients (pymongo, Playwright, Celery) declare their public
    surface this way, so importing the component (as the DAG file's parse does) costs nothing.
    """

    def __getattr__(name: str) -> Any:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{exports[name]}"), name)

    return __getattr__
