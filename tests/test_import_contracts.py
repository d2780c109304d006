"""The layering rules, proved by a generic import reader: import-linter's contracts in ``.importlinter``
(layers without cycles, Airflow only in the adapters, every component used only through its face), on
grimp's graph of every import of the package. ``tests/test_layering.py`` and ``tests/test_public_surface.py``
say the same with our own ``ast`` readers and name the offending line; this file shows that a tool we did not
write agrees, and that it would see a break."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from harvester.settings import REPOSITORY_ROOT

pytestmark = pytest.mark.unit

CONFIG = REPOSITORY_ROOT / ".importlinter"
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(package_parent: Path) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "PYTHONPATH": str(package_parent)}
    return subprocess.run([str(LINT_IMPORTS), "--no-cache", str(CONFIG)], cwd=package_parent, env=environment,
                          capture_output=True, text=True, timeout=120)


def test_every_contract_is_kept() -> None:
    result = lint_imports(REPOSITORY_ROOT / "include")
    assert result.returncode == 0, result.stdout + result.stderr
    assert " 0 broken" in result.stdout


def test_the_contracts_see_a_submodule_import_a_layer_upside_down_and_airflow_outside_the_adapters(
        tmp_path: Path) -> None:
    package = tmp_path / "harvester"
    shutil.copytree(REPOSITORY_ROOT / "include" / "harvester", package,
                    ignore=shutil.ignore_patterns("__pycache__", "static"))
    with (package / "workers" / "clients.py").open("a") as module:
        module.write("\n\ndef _probe() -> None:\n    from harvester.storage.packages import PackageStore  # noqa\n")
    with (package / "storage" / "runs.py").open("a") as module:
        module.write("\n\ndef _probe() -> None:\n    from harvester.workers import app  # noqa\n")
    with (package / "scraping" / "discovery" / "links.py").open("a") as module:
        module.write("\n\ndef _probe() -> None:\n    import airflow.sdk  # noqa\n")
    result = lint_imports(tmp_path)
    assert result.returncode != 0
    broken = [line for line in result.stdout.splitlines() if "BROKEN" in line and "broken." not in line]
    assert len(broken) == 3, result.stdout
    assert any("harvester.storage only through its face" in line for line in broken)
    assert any("Components are layered" in line for line in broken)
    assert any("Only the Airflow adapters import Airflow" in line for line in broken)


def test_the_room_contracts_see_extraction_reach_for_fetching_and_a_room_skip_a_face(tmp_path: Path) -> None:
    package = tmp_path / "harvester"
    shutil.copytree(REPOSITORY_ROOT / "include" / "harvester", package,
                    ignore=shutil.ignore_patterns("__pycache__", "static"))
    with (package / "scraping" / "extraction" / "coercion.py").open("a") as module:
        module.write("\n\ndef _probe() -> None:\n    from harvester.scraping.fetching import Fetcher  # noqa\n")
    with (package / "scraping" / "discovery" / "sitemaps.py").open("a") as module:
        module.write("\n\ndef _probe() -> None:\n"
                     "    from harvester.scraping.fetching.robots import RobotsCache  # noqa\n")
    result = lint_imports(tmp_path)
    assert result.returncode != 0
    report = " ".join(result.stdout.split())  # the contracts' names wrap at the terminal's width
    assert "fetching none of the others BROKEN" in report, result.stdout
    assert "harvester.scraping.fetching only through its face BROKEN" in report, result.stdout
