"""`harvester metadata-cleanup` (harvester.services.maintenance) against the cluster mode's PostgreSQL: old runs of
page_slots and harvest_* go with their task instances and logs, the latest scheduled run of each DAG stays, and
other DAGs keep their whole history."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from harvester.services.cluster import Cluster, ClusterPorts
from harvester.services.maintenance import cleanup_command, failed_tables, harvester_dag_ids
from harvester.settings import REPOSITORY_ROOT

from tests.fixtures.servers import VENV_BIN

pytestmark = [pytest.mark.integration, pytest.mark.airflow]
NOW = datetime.now(UTC)
DAGS = ("page_slots", "harvest_demo_shop", "someone_elses")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """The cluster mode's PostgreSQL with Airflow's metadata database migrated (nothing else of the topology)."""
    base = tmp_path_factory.mktemp("metadata")
    sources = base / "sources"
    sources.mkdir()
    (sources / "demo_shop.yaml").write_text((REPOSITORY_ROOT / "include" / "sources" / "demo_shop.yaml").read_text())
    topology = Cluster(base, ClusterPorts.free(), mongo_uri="mongodb://127.0.0.1:1/",
                       demo_site_url="http://127.0.0.1:9", sources_dir=sources, machines=[], fast_unsafe_postgres=True)
    try:
        topology.start_metadata_database()
        yield topology
    finally:
        topology.destroy()


def seed(cluster: Cluster) -> None:
    """Per DAG: two scheduled runs of 60 and 61 days ago, one manual run of 59 days ago and one scheduled run of
    yesterday, each with a task instance and a log row."""
    connection = cluster.postgres.connect("airflow")
    with connection, connection.cursor() as cursor:
        cursor.execute("DELETE FROM log; DELETE FROM task_instance; DELETE FROM dag_run")
        for dag_id in DAGS:
            for run_id, age, run_type in (("old-1", 61, "scheduled"), ("old-2", 60, "scheduled"),
                                          ("old-manual", 59, "manual"), ("recent", 1, "scheduled")):
                started = NOW - timedelta(days=age)
                cursor.execute(
                    "INSERT INTO dag_run (dag_id, run_id, run_type, run_after, logical_date, start_date, state,"
                    " clear_number, log_template_id) VALUES (%s, %s, %s, %s, %s, %s, 'success', 0,"
                    " (SELECT max(id) FROM log_template))",
                    (dag_id, run_id, run_type, started, started, started))
                cursor.execute(
                    "INSERT INTO task_instance (id, dag_id, run_id, task_id, map_index, try_number, pool, pool_slots,"
                    " start_date, state) VALUES (%s, %s, %s, 'plan', -1, 1, 'default_pool', 1, %s, 'success')",
                    (str(uuid.uuid4()), dag_id, run_id, started))
                cursor.execute("INSERT INTO log (dttm, dag_id, run_id, event) VALUES (%s, %s, %s, 'cli_task_run')",
                               (started, dag_id, run_id))
    connection.close()


def rows(cluster: Cluster, table: str) -> dict[str, set[str]]:
    connection = cluster.postgres.connect("airflow")
    with connection, connection.cursor() as cursor:
        cursor.execute(f"SELECT dag_id, run_id FROM {table}")  # our own table names
        found: dict[str, set[str]] = {dag_id: set() for dag_id in DAGS}
        for dag_id, run_id in cursor.fetchall():
            if dag_id in found:  # the CLI logs its own events (dag_id NULL)
                found[dag_id].add(run_id)
    connection.close()
    return found


def cleanup(cluster: Cluster, *arguments: str) -> subprocess.CompletedProcess[str]:
    env = {**cluster.airflow_environment(), "HARVESTER_SOURCES_DIR": str(cluster.sources_dir)}
    return subprocess.run([str(VENV_BIN / "harvester"), "metadata-cleanup", *arguments], env=env,
                          capture_output=True, text=True, timeout=600, cwd=REPOSITORY_ROOT)


def test_old_runs_of_harvester_dags_go_and_the_rest_stays(cluster: Cluster) -> None:
    seed(cluster)
    everything = {"old-1", "old-2", "old-manual", "recent"}

    dry = cleanup(cluster, "--dry-run")
    assert dry.returncode == 0, dry.stdout[-3000:] + dry.stderr[-3000:]
    assert rows(cluster, "dag_run") == dict.fromkeys(DAGS, everything)

    result = cleanup(cluster)  # the setting's default retention: 30 days
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    kept = {"page_slots": {"recent"}, "harvest_demo_shop": {"recent"}, "someone_elses": everything}
    assert rows(cluster, "dag_run") == kept
    assert rows(cluster, "task_instance") == kept  # cascaded with their runs
    assert rows(cluster, "log") == kept

    again = cleanup(cluster, "--retention-days", "0.5")  # yesterday's run is the latest scheduled one: it stays
    assert again.returncode == 0, again.stderr[-3000:]
    assert rows(cluster, "dag_run") == kept


@pytest.mark.unit
def test_the_command_names_only_harvester_dags_and_never_archives(tmp_path: Path) -> None:
    before = datetime(2026, 1, 1, tzinfo=UTC)
    command = cleanup_command(harvester_dag_ids(["b", "a"]), before, airflow="airflow")
    assert command[:3] == ["airflow", "db", "clean"]
    assert command[command.index("--dag-ids") + 1] == "page_slots,harvest_a,harvest_b"
    assert command[command.index("--clean-before-timestamp") + 1] == "2026-01-01T00:00:00+00:00"
    assert {"--skip-archive", "--yes"} <= set(command)
    assert "dag_run" in command[command.index("--tables") + 1].split(",")
    # a table Airflow could not clean fails the cleanup, but for the two its own config gets wrong
    logged = "Encountered error when attempting to clean table '{}'. "
    assert failed_tables(logged.format("deadline") + logged.format("task_reschedule")) == set()
    assert failed_tables(logged.format("deadline") + logged.format("xcom")) == {"xcom"}
