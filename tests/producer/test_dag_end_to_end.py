"""The producer DAG as Airflow runs it: `airflow dags test` of a real producer DAG against real Redis, MongoDB, the
distributor process, Celery workers and the demo site.

- a full run lands every record; a run killed mid-way (SIGKILL of the worker and of the DAG test
  process) and re-run lands every record exactly once;
- the harvesting lag skips fresh URLs and the batch limit defers the rest to the next run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from harvester.settings import REPOSITORY_ROOT, HarvesterSettings
from harvester.storage.packages import PackageStatus

from tests.fixtures.demo_site import demo_source_document
from tests.fixtures.servers import VENV_BIN, ServerProcess

pytestmark = [pytest.mark.integration, pytest.mark.airflow, pytest.mark.slow]


def _airflow_env(home: Path) -> dict[str, str]:
    return {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPOSITORY_ROOT / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
    }


@pytest.fixture(scope="session")
def airflow_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A scratch Airflow home with a migrated SQLite metadata database (once per session)."""
    home = tmp_path_factory.mktemp("airflow-home")
    result = subprocess.run([str(VENV_BIN / "airflow"), "db", "migrate"], env=_airflow_env(home),
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return home


@pytest.fixture
def dag_settings(configure_settings: Callable[..., HarvesterSettings]) -> HarvesterSettings:
    """Test servers, a sources directory of this test, short leases and a fast sensor (also exported).

    Delivery recovery is short too, as in the fault matrix (tests/reliability/harness.py): the test's
    SIGKILL of a worker can land while its main process holds a message it has not started. Registered
    as unacknowledged, kombu hands it out again after the visibility timeout (an hour by default); caught
    between kombu's BRPOP and that registration, the message is gone, and its queued tasks go back to
    intake after ``queued_lease_seconds`` (three hours by default). Either way the run would wait."""
    return configure_settings(lease_seconds=6, heartbeat_seconds=1, reap_interval_seconds=1, retry_base_seconds=0.2,
                              retry_max_seconds=1, producer_poll_seconds=1, producer_wait_timeout_seconds=240,
                              producer_mongo_timeout_ms=5000, celery_visibility_timeout_seconds=10,
                              queued_lease_seconds=20)


@pytest.fixture
def distributor(dag_settings: HarvesterSettings, start_distributor) -> ServerProcess:
    return start_distributor()


def _write_source(settings: HarvesterSettings, document: dict[str, Any]) -> None:
    (settings.sources_dir / f"{document['name']}.yaml").write_text(yaml.safe_dump(document, sort_keys=False))


def _dags_test(home: Path, dag_id: str, log_path: Path, conf: dict[str, Any] | None = None,
               wait: bool = True, timeout: float = 300) -> subprocess.Popen[bytes]:
    command = [str(VENV_BIN / "airflow"), "dags", "test", dag_id]
    if conf:
        command += ["--conf", json.dumps(conf)]
    with log_path.open("ab") as log:
        process = subprocess.Popen(command, env=_airflow_env(home), stdout=log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True, cwd=REPOSITORY_ROOT)
    if wait:
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            pytest.fail(f"airflow dags test {dag_id} did not finish; log {log_path}:\n"
                        + log_path.read_text(errors="replace")[-5000:])
    return process


def _report(database, source: str) -> dict[str, Any]:
    runs = list(database["runs"].find({"source": source, "status": "reported"}).sort("started_at", -1))
    assert runs, f"no reported run of {source}: {list(database['runs'].find({}, {'_id': 0}))}"
    return runs[0]["report"]


def test_full_run_then_killed_run_resumes_and_lands_every_record_once(
        airflow_home, dag_settings, demo_site, mongo_server, celery_worker_factory, distributor, tmp_path) -> None:
    name = "e2e_dag_shop"
    _write_source(dag_settings, demo_source_document(
        demo_site.url, name, batch={"size": 50, "max_packages": 20}, harvesting_lag=0,
        rate_limit={"max_active": 6, "per_minute": 100_000}))
    database = mongo_server.client()[dag_settings.mongo_database]
    output = database[name]
    worker = celery_worker_factory(queues="default,priority", concurrency=2)

    # 1. A full run lands every record.
    log_path = tmp_path / "dags-test-1.log"
    _dags_test(airflow_home, f"harvest_{name}", log_path)
    log_text = log_path.read_text(errors="replace")
    report = _report(database, name)
    assert report["complete"], log_text[-5000:]
    assert report["records_stored"] == 500 and report["records_new"] == 500, report
    assert output.count_documents({}) == 500 and len(output.distinct("url")) == 500
    assert "packages 1/1 done" in log_text  # the sensor's progress line
    first_run = report["run_id"]

    # 2. A second run, killed mid-way: SIGKILL of the worker and of the `airflow dags test` process.
    output.delete_many({})
    demo_site.reset()
    log_path = tmp_path / "dags-test-2.log"
    process = _dags_test(airflow_home, f"harvest_{name}", log_path, wait=False)
    deadline = time.monotonic() + 180
    while output.count_documents({}) < 50:
        assert process.poll() is None, log_path.read_text(errors="replace")[-5000:]
        assert time.monotonic() < deadline, "the second run stored nothing"
        time.sleep(0.2)
    worker.kill()
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)
    killed_at = output.count_documents({})
    assert killed_at < 500, "the run finished before it could be killed; nothing was tested"
    open_run = database["runs"].find_one({"source": name, "status": {"$ne": "reported"}})
    assert open_run is not None and open_run["run_id"] != first_run

    # 3. Re-run (a new `airflow dags test`, so a new Airflow run id): it continues the killed run.
    celery_worker_factory(queues="default,priority", concurrency=2)
    log_path = tmp_path / "dags-test-3.log"
    _dags_test(airflow_home, f"harvest_{name}", log_path)
    report = _report(database, name)
    assert report["run_id"] == open_run["run_id"], report
    assert report["complete"] and report["records_stored"] == 500, report
    assert output.count_documents({}) == 500 and len(output.distinct("url")) == 500
    assert output.count_documents({"run_id": open_run["run_id"]}) == 500
    packages = list(database["packages"].find({"source": name, "run_id": open_run["run_id"]}))
    assert packages and all(p["status"] == PackageStatus.FINISHED for p in packages)
    assert database["runs"].find_one({"run_id": open_run["run_id"]})["airflow_run_ids"].__len__() == 2


def test_harvesting_lag_skips_fresh_urls_and_batch_limit_defers_the_rest(
        airflow_home, dag_settings, demo_site, mongo_server, celery_worker_factory, distributor, tmp_path) -> None:
    name = "e2e_dag_inputs"
    document = demo_source_document(demo_site.url, name, batch={"size": 5, "max_packages": 2},
                                    harvesting_lag="1h")
    document["input"] = {"kind": "details", "mongo": {"collection": "e2e_inputs", "filter": {"active": True}}}
    document.pop("listing")
    _write_source(dag_settings, document)
    database = mongo_server.client()[dag_settings.mongo_database]
    urls = [f"{demo_site.url}/product/{i}" for i in range(1, 21)]
    database["e2e_inputs"].insert_many(
        [{"url": url, "active": True} for url in urls]
        + [{"url": "not a url", "active": True}, {"active": True}, {"url": urls[0], "active": False}])
    now = datetime.now(UTC)
    output = database[name]
    output.insert_many([{"url": url, "sku": "FRESH", "harvested_at": now} for url in urls[:4]])
    celery_worker_factory(queues="default,priority", concurrency=2)

    _dags_test(airflow_home, f"harvest_{name}", tmp_path / "dags-test-1.log")
    first = _report(database, name)
    assert first["complete"] and first["batch_limit_reached"], first
    assert (first["urls_planned"], first["urls_skipped_fresh"], first["urls_skipped_invalid"]) == (10, 4, 2)
    assert first["records_stored"] == 10
    assert output.count_documents({"sku": "FRESH"}) == 4  # fresh URLs were not fetched again

    _dags_test(airflow_home, f"harvest_{name}", tmp_path / "dags-test-2.log")
    second = _report(database, name)
    assert second["run_id"] != first["run_id"]
    assert second["complete"] and not second["batch_limit_reached"], second
    assert (second["urls_planned"], second["urls_skipped_fresh"]) == (6, 14)
    assert output.count_documents({}) == 20 and len(output.distinct("url")) == 20
    assert output.count_documents({"sku": "FRESH"}) == 4
    assert demo_site.client_stats(name)["total"] == 16

    # A manual trigger's params: harvest one given URL now, whatever its age, in packages of 1.
    _dags_test(airflow_home, f"harvest_{name}", tmp_path / "dags-test-3.log",
               conf={"urls": [urls[0]], "batch_size": 1})
    manual = _report(database, name)
    assert manual["run_id"] not in (first["run_id"], second["run_id"])
    assert (manual["urls_planned"], manual["urls_skipped_fresh"], manual["records_stored"]) == (1, 0, 1), manual
    assert output.find_one({"url": urls[0]})["sku"] != "FRESH"
    assert output.count_documents({"sku": "FRESH"}) == 3 and output.count_documents({}) == 20


def _dag_run_states(home: Path, dag_id: str) -> list[str]:
    listed = subprocess.run([str(VENV_BIN / "airflow"), "dags", "list-runs", dag_id, "-o", "json"],
                            env=_airflow_env(home), capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0, listed.stderr[-3000:]
    runs = json.loads(listed.stdout.strip().splitlines()[-1])  # warnings come before the JSON
    return [run["state"] for run in sorted(runs, key=lambda run: run.get("start_date") or "")]


def test_a_run_whose_pages_lose_a_required_field_fails_with_the_reason_or_warns(
        airflow_home, dag_settings, demo_site, mongo_server, celery_worker_factory, distributor, tmp_path) -> None:
    """The site drops the required sku; the report task fails the DAG run with the reason in one line,
    at once: the harvest is over, so retrying the report cannot change its data (under `make run` the source's
    3 retries kept the run "running" for 3 more minutes, and each retry reported again). The same source with
    ``quality: {on_breach: warn}`` stays green and its report says degraded."""
    import urllib.request

    def markup(query: str = "") -> None:
        urllib.request.urlopen(urllib.request.Request(f"{demo_site.url}/_markup{query}", method="POST", data=b""),
                               timeout=5).close()

    name = "e2e_dag_quality"
    document = demo_source_document(demo_site.url, name, harvesting_lag=0, retries=1,
                                    batch={"size": 10, "max_packages": 5})
    document.pop("listing")
    document["input"] = {"kind": "details", "seeds": [f"{demo_site.url}/product/{n}" for n in range(1, 11)]}
    _write_source(dag_settings, document)
    database = mongo_server.client()[dag_settings.mongo_database]
    celery_worker_factory(queues="default,priority", concurrency=2)
    markup("?sku=code")
    try:
        log_path = tmp_path / "dags-test-fail.log"
        _dags_test(airflow_home, f"harvest_{name}", log_path)
        log_text = log_path.read_text(errors="replace")
        assert _dag_run_states(airflow_home, f"harvest_{name}")[-1] == "failed", log_text[-5000:]
        assert "breached its quality: 100 % of pages rejected: sku missing on 10 of 10" in log_text, log_text[-5000:]
        assert "up_for_retry" not in log_text, "the report task was retried on a breach its retry cannot change"
        failed = _report(database, name)
        assert failed["quality"]["outcome"] == "failed" and failed["selector_drift"] == [], failed["quality"]

        _write_source(dag_settings, {**document, "quality": {"on_breach": "warn"}})
        log_path = tmp_path / "dags-test-warn.log"
        _dags_test(airflow_home, f"harvest_{name}", log_path)
        log_text = log_path.read_text(errors="replace")
        assert _dag_run_states(airflow_home, f"harvest_{name}")[-1] == "success", log_text[-5000:]
        warned = _report(database, name)
        assert warned["run_id"] != failed["run_id"]
        assert warned["quality"]["outcome"] == "degraded" and "sku missing on 10 of 10" in warned["quality"]["reason"]
        assert "is degraded: 100 % of pages rejected" in log_text
    finally:
        markup()
