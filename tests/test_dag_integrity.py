"""DAG integrity: every file in dags/ parses through a real DagBag, cleanly and without side effects.

The parse runs in a fresh interpreter with a scratch AIRFLOW_HOME and guards that refuse network
connections, Variable and Connection lookups and metadata-database access at parse time
(tests/config/dagbag_probe.py): DAG files only declare.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from harvester.settings import REPOSITORY_ROOT

from tests.config.dagbag_probe import parse_dag_folder

pytestmark = [pytest.mark.airflow, pytest.mark.integration]

DAGS = REPOSITORY_ROOT / "dags"
DAG_FILES = sorted(path for path in DAGS.glob("*.py") if not path.name.startswith("_"))


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return parse_dag_folder(DAGS, tmp_path_factory.mktemp("airflow"))


def test_there_are_dag_files() -> None:
    assert any(path.name == "harvest_sources.py" for path in DAG_FILES)


@pytest.mark.parametrize("path", DAG_FILES, ids=lambda path: path.name)
def test_every_dag_file_is_seen_by_airflow_safe_mode(path: Path) -> None:
    """Airflow skips a .py file that mentions neither 'airflow' nor 'dag' (DAG_DISCOVERY_SAFE_MODE)."""
    text = path.read_text().lower()
    assert "airflow" in text and "dag" in text


def test_no_import_errors(report: dict[str, Any]) -> None:
    assert report["import_errors"] == {}


def test_parsing_makes_no_network_connection_or_variable_lookups(report: dict[str, Any]) -> None:
    assert report["forbidden"] == []


def test_dags_were_found(report: dict[str, Any]) -> None:
    assert report["dags"], "the DagBag found no DAG at all"
    assert "harvest_demo_shop" in report["dags"]


def test_every_dag_has_tags_an_owner_and_retries(report: dict[str, Any]) -> None:
    for dag_id, dag in report["dags"].items():
        assert dag["tags"], f"{dag_id} has no tags"
        assert dag["owner"] and dag["owner"] != "airflow", f"{dag_id} has no owner of its own"
        assert "retries" in dag["default_args"], f"{dag_id} sets no retries in default_args"
