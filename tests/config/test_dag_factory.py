"""The DAG factory through a real Airflow DagBag (and, once, a real metadata database).

Each parse runs in a fresh interpreter with a scratch AIRFLOW_HOME, as Airflow's DAG processor
parses each file in a process of its own; see tests/config/dagbag_probe.py for the guards.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from harvester.settings import REPOSITORY_ROOT

from tests.config.dagbag_probe import parse_dag_folder
from tests.config.helpers import MINIMAL
from tests.fixtures.airflow_db import with_migrated_database

pytestmark = [pytest.mark.airflow, pytest.mark.integration]

DAGS = REPOSITORY_ROOT / "dags"
FACTORY = DAGS / "harvest_sources.py"
ERRORS_FILE = DAGS / "harvest_source_errors.py"
EXAMPLES = REPOSITORY_ROOT / "include" / "sources"


def sources_dir(tmp_path: Path, files: dict[str, str]) -> Path:
    directory = tmp_path / "sources"
    directory.mkdir(exist_ok=True)
    for name, text in files.items():
        (directory / name).write_text(textwrap.dedent(text))
    return directory


def test_every_example_source_gets_its_dag(tmp_path: Path) -> None:
    report = parse_dag_folder(DAGS, tmp_path / "airflow", {"HARVESTER_DEMO_SITE_URL": "http://127.0.0.1:1"})
    assert report["import_errors"] == {} and report["forbidden"] == []
    dags = report["dags"]
    assert {"harvest_demo_shop", "harvest_demo_shop_browser", "harvest_demo_shop_from_mongo"} <= set(dags)

    shop = dags["harvest_demo_shop"]
    assert shop["fileloc"].endswith("harvest_sources.py")
    assert shop["schedule"] == "0 */6 * * *"
    assert shop["tags"] == ["harvester", "high", "http"]
    assert shop["owner"] == "data-engineering"
    assert shop["default_args"]["retries"] == "3" and set(shop["retries"]) == {3}
    assert shop["max_active_runs"] == 1 and shop["catchup"] is False
    assert "plan" in shop["tasks"]
    assert shop["params"] == {"batch_size": 50, "max_packages": 20, "urls": [], "detail_urls": [],
                              "min_stored_share": 0.95,
                              "max_rejected_share": 0.05, "max_dead_share": 0.1, "min_records": 0,
                              "on_breach": "fail"}  # the quality thresholds, the source's
    assert shop["param_schemas"]["on_breach"]["enum"] == ["fail", "warn"]
    assert shop["param_schemas"]["batch_size"]["type"] == "integer"
    assert shop["param_schemas"]["urls"]["type"] == "array"
    assert shop["param_schemas"]["detail_urls"]["type"] == "array"
    doc = shop["doc_md"]
    assert doc.startswith("Products of the local demo shop")
    for fact in ("`priority`", "8 in flight, 600 per minute", "50 URLs per package, at most 20 packages", "6h",
                 "demo_shop_products", "keyed by sku", "demo_shop.yaml"):
        assert fact in doc

    browser = dags["harvest_demo_shop_browser"]
    assert browser["tags"] == ["SG", "browser", "harvester", "normal"] and "`pageslots`" in browser["doc_md"]
    assert "browser (country SG)" in browser["doc_md"]
    assert dags["harvest_demo_shop_from_mongo"]["schedule"] == "30 2 * * *"


def test_a_broken_file_is_an_import_error_and_the_others_still_load(tmp_path: Path) -> None:
    directory = sources_dir(tmp_path, {
        "good.yaml": MINIMAL.replace("shop", "good"),
        "other.yaml": MINIMAL.replace("shop", "other"),
        "typo.yaml": MINIMAL.replace("shop", "typo") + "rate_limit:\n  max_actve: 3\n",
        "unparsable.yaml": "name: [unclosed\n",
        "secret.yaml": MINIMAL.replace("shop", "secret") + "output:\n  password: hunter2\n",
        "zz_copy.yaml": MINIMAL.replace("shop", "good"),
    })
    report = parse_dag_folder(DAGS, tmp_path / "airflow", {"HARVESTER_SOURCES_DIR": str(directory)})
    assert sorted(source_dags(report["dags"])) == ["harvest_good", "harvest_other"]
    assert report["forbidden"] == []
    assert [Path(key).name for key in report["import_errors"]] == [ERRORS_FILE.name]
    error = next(iter(report["import_errors"].values()))
    assert "InvalidSourceFiles: 4 source file(s) could not be loaded" in error
    assert f"{directory / 'typo.yaml'}:7: rate_limit.max_actve: unknown key" in error
    assert f"{directory / 'unparsable.yaml'}:2: (source): not valid YAML" in error
    assert f"{directory / 'secret.yaml'}:7: output.password: credentials never go in source YAML" in error
    assert f"{directory / 'zz_copy.yaml'}:1: name: duplicate source name 'good': also defined in " \
           f"{directory / 'good.yaml'}" in error


def test_an_edited_or_added_file_shows_on_the_next_parse(tmp_path: Path) -> None:
    directory = sources_dir(tmp_path, {"shop.yaml": MINIMAL})
    env = {"HARVESTER_SOURCES_DIR": str(directory)}
    first = parse_dag_folder(DAGS, tmp_path / "airflow", env)
    assert first["dags"]["harvest_shop"]["schedule"] == "@daily"

    (directory / "shop.yaml").write_text(MINIMAL + 'schedule: "*/30 * * * *"\nbatch: {size: 7}\n')
    (directory / "new.yaml").write_text(MINIMAL.replace("shop", "new"))
    second = parse_dag_folder(DAGS, tmp_path / "airflow", env)
    assert sorted(source_dags(second["dags"])) == ["harvest_new", "harvest_shop"]
    assert second["dags"]["harvest_shop"]["schedule"] == "*/30 * * * *"
    assert second["dags"]["harvest_shop"]["params"]["batch_size"] == 7



def source_dags(dag_ids: list[str]) -> list[str]:
    """The DAGs made from source files (the folder also holds page_slots, which no source file makes)."""
    return [dag_id for dag_id in dag_ids if dag_id.startswith("harvest_")]

@pytest.mark.slow
def test_the_metadata_database_shows_the_error_and_keeps_the_good_dags_scheduled(
        tmp_path: Path, migrated_airflow_database: Path) -> None:
    """What the UI reads: import errors from `airflow dags list-import-errors`, DAG rows not stale."""
    directory = sources_dir(tmp_path, {
        "good.yaml": MINIMAL.replace("shop", "good"),
        "bad.yaml": MINIMAL.replace("shop", "bad") + "retries: -1\n",
    })
    home = with_migrated_database(migrated_airflow_database, tmp_path / "airflow")  # `airflow db migrate`'s result
    env = {**os.environ, "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
           "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS), "HARVESTER_SOURCES_DIR": str(directory)}
    airflow = [str(Path(sys.executable).parent / "airflow")]

    def run(*args: str, expected_returncode: int = 0) -> str:
        result = subprocess.run([*airflow, *args], env=env, capture_output=True, text=True, timeout=300, check=False)
        assert result.returncode == expected_returncode, result.stderr[-3000:]
        return result.stdout

    run("dags", "reserialize")
    errors = json.loads(run("dags", "list-import-errors", "-o", "json", expected_returncode=1).strip().splitlines()[-1])
    assert [error["filepath"] for error in errors] == [ERRORS_FILE.name]
    assert f"{directory / 'bad.yaml'}:6: retries: Input should be greater than or equal to 0" in errors[0]["error"]
    with sqlite3.connect(home / "airflow.db") as database:
        rows = database.execute("select dag_id, is_stale, has_import_errors from dag order by dag_id").fetchall()
    # page_slots is in the same DAG folder and not made from source files: it stays scheduled too
    assert rows == [("harvest_good", 0, 0), ("page_slots", 0, 0)]


@pytest.mark.unit
def test_param_defaults_are_valid_and_the_tasks_read_the_dags_params() -> None:
    """The factory skips Airflow's parse-time param check for speed: the defaults must still validate,
    limits at their bounds included, and a trigger's bad value must still be refused."""
    from airflow.sdk.definitions.param import process_params
    from airflow.sdk.exceptions import ParamValidationError
    from harvester.airflow.dags import build_source_dag
    from harvester.config.loader import get_source
    from harvester.config.model import MAX_BATCH_SIZE

    for name in ("demo_shop", "demo_shop_browser", "demo_shop_from_mongo"):
        source = get_source(name)
        dag = build_source_dag(source)
        assert dag.params.validate()["batch_size"] == source.batch.size
        bound = source.model_copy(update={"batch": source.batch.model_copy(update={"size": MAX_BATCH_SIZE})})
        assert build_source_dag(bound).params.validate()["batch_size"] == MAX_BATCH_SIZE
        task = dag.get_task("plan")
        merged = process_params(dag, task, {"max_packages": 3}, suppress_exception=False)
        assert merged["max_packages"] == 3 and merged["batch_size"] == source.batch.size
        with pytest.raises(ParamValidationError):
            process_params(dag, task, {"batch_size": 0}, suppress_exception=False)


@pytest.mark.unit
def test_the_sensor_is_retried_even_for_a_source_without_retries() -> None:
    """``wait_for_harvest`` only waits: an Airflow race that fails it (the executor's late word on its deferral, seen
    as "TI is no longer in the running state" in CI) must not fail a harvest whose pages are done. The tasks that
    act keep the source's retries."""
    from harvester.airflow.dags import build_source_dag
    from harvester.config.loader import get_source

    source = get_source("demo_shop")
    for retries in (0, 5):
        dag = build_source_dag(source.model_copy(update={"retries": retries}))
        assert dag.get_task("wait_for_harvest").retries == max(1, retries)
        assert {dag.get_task(name).retries for name in ("plan", "produce", "report")} == {retries}


@pytest.mark.unit
def test_only_the_dag_of_the_parsing_context_is_built(monkeypatch: pytest.MonkeyPatch) -> None:
    """A task start parses the file with get_parsing_context().dag_id set: one DAG, not every source."""
    from harvester.airflow.dags import build_source_dags
    from harvester.config.loader import load_sources

    monkeypatch.delenv("_AIRFLOW_PARSING_CONTEXT_DAG_ID", raising=False)
    everything = {dag.dag_id for dag in build_source_dags()}
    assert {"harvest_demo_shop", "harvest_demo_shop_browser"} <= everything
    monkeypatch.setenv("_AIRFLOW_PARSING_CONTEXT_DAG_ID", "harvest_demo_shop_browser")
    assert [dag.dag_id for dag in build_source_dags()] == ["harvest_demo_shop_browser"]
    assert [dag.dag_id for dag in build_source_dags(load_sources())] == ["harvest_demo_shop_browser"]
    monkeypatch.setenv("_AIRFLOW_PARSING_CONTEXT_DAG_ID", "some_other_dag")  # not ours: build them all
    assert {dag.dag_id for dag in build_source_dags()} == everything
