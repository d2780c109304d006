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

from tests.fixtures.airflow_db import with_migrated_database
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
def airflow_home(tmp_path_factory: pytest.TempPathFactory, migrated_airflow_database: Path) -> Path:
    """A scratch Airflow home with a migrated SQLite metadata database (once per session)."""
    return with_migrated_database(migrated_airflow_database, tmp_path_factory.mktemp("airflow-home"))


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


REAL_ITEMS = 50
DELISTING_WAYS = ("410", "404", "soft", "home", "listing")  # 10 % of the items each way
WALLED_ITEMS, WALL_AFTER = 10, 5  # the 403 wall's phase: the first items, past the first few requests


def _post(url: str) -> dict[str, Any]:
    import urllib.request

    with urllib.request.urlopen(urllib.request.Request(url, method="POST", data=b""), timeout=10) as response:
        return json.load(response)


def _challenged(site) -> int:
    """Challenge pages the site's WAF has served since it started (the session shares the site: take deltas)."""
    import urllib.request

    with urllib.request.urlopen(f"{site.url}/_challenge", timeout=10) as response:
        return int(json.load(response)["challenged"])


def _records(database, name: str) -> dict[str, dict[str, Any]]:
    return {record["url"]: record for record in database[name].find({})}


def _assert_all_right(records: dict[str, dict[str, Any]], site) -> None:
    """Every item stored with the site's values: none missing, none null, none overwritten by a challenge page."""
    from harvester_demo.app import product_facts

    wrong = {number: records.get(f"{site.url}/life/shop/item/{number}") for number in range(1, REAL_ITEMS + 1)
             if (record := records.get(f"{site.url}/life/shop/item/{number}")) is None
             or any(record[name] != product_facts(number)[name] for name in ("title", "price", "stock"))}
    assert wrong == {}, f"{len(wrong)} items wrong or missing, e.g. {list(wrong.items())[:2]}"


def _run_state(log_path: Path) -> str:
    """The DAG run's final state as `airflow dags test` logs it (cheaper than another Airflow command)."""
    finished = [line for line in log_path.read_text(errors="replace").splitlines() if "DagRun Finished:" in line]
    assert finished, f"no finished DAG run in {log_path}"
    return finished[-1].split(" state=", 1)[1].split(",", 1)[0]


@pytest.fixture
def real_site_settings(configure_settings: Callable[..., HarvesterSettings]) -> HarvesterSettings:
    """The DAG test's settings, with short rate and block windows: a site that challenges past N requests a
    (3 s) window is a run of seconds (as tests/workers/test_blocks_end_to_end.py sets them in-process). No worker
    is killed here, so Celery's visibility timeout stays above the longest wait for a slowed host's request slot
    (``host_rate_max_wait_seconds``): a batch waiting for its host is not handed out a second time."""
    return configure_settings(lease_seconds=30, heartbeat_seconds=1, reap_interval_seconds=1, retry_base_seconds=0.2,
                              retry_max_seconds=1, producer_poll_seconds=1, producer_wait_timeout_seconds=240,
                              producer_mongo_timeout_ms=5000, celery_visibility_timeout_seconds=60,
                              queued_lease_seconds=90, rate_window_seconds=3, rate_window_margin_seconds=0.2,
                              block_window_seconds=3, block_pause_after=8, block_pause_seconds=1,
                              host_rate_max_wait_seconds=20)


@pytest.fixture
def real_site(demo_site):
    """The demo site with its WAF down and every item listed, before and after (the session shares it)."""
    from harvester_demo import challenges

    assert "/life/shop/" in challenges.CHALLENGED_PREFIXES, f"{challenges.__file__}: an older demo, no WAF on items"
    _post(f"{demo_site.url}/_challenge")
    _post(f"{demo_site.url}/_life/reset")
    yield demo_site
    _post(f"{demo_site.url}/_challenge")
    _post(f"{demo_site.url}/_life/reset")


@pytest.mark.timeout(900)  # four `airflow dags test` runs, mostly Airflow start-up: 5.5-8 min at loads of 15-30
def test_a_real_site_through_the_dag_blocks_delisting_and_relisting(
        airflow_home, real_site_settings, real_site, mongo_server, celery_worker_factory, start_distributor,
        tmp_path) -> None:
    """A real site's ways end to end, each phase one `airflow dags test` of one Airflow home, with the distributor
    and a Celery worker: a source of only optional attributes harvests 50 items; 10 % of the items delisted each
    way carry ``gone_at`` (the run green, 0 dead letters); then, relisted, the site's WAF challenges past 12
    requests a 3 s window (200 "Just a moment...") and relents: ``gone_at`` cleared, no stored value overwritten
    with null, the blocks counted and retried, all 50 right, the run green; a WAF that never relents (403) fails
    the run past the retries and still costs no value.

    Blocks cut the host's request rate, which pages coming clean raise back slowly (2 % a page, by design), so the
    phases after the first block run slowed: the site relents after its first challenges, and the wall's phase
    asks for 10 items only."""
    import threading

    site, name = real_site, "e2e_dag_real_site"
    start_distributor()
    seeds = [f"{site.url}/life/shop/item/{number}" for number in range(1, REAL_ITEMS + 1)]
    document = demo_source_document(
        site.url, name, input={"kind": "details", "seeds": seeds}, listing=None, harvesting_lag=0, retries=12,
        batch={"size": REAL_ITEMS, "max_packages": 1}, rate_limit={"max_active": 8, "per_minute": 100_000},
        gone={"texts": ["Product not found"]},
        attributes={"title": {"css": "h1.title"}, "price": {"css": ".price", "type": "float"},
                    "stock": {"css": ".stock", "type": "int"}})
    _write_source(real_site_settings, document)
    database = mongo_server.client()[real_site_settings.mongo_database]
    celery_worker_factory(queues="default,priority", concurrency=2)

    def harvest(phase: str) -> tuple[dict[str, Any], str]:
        log_path = tmp_path / f"dags-test-{phase}.log"
        _dags_test(airflow_home, f"harvest_{name}", log_path, timeout=360)
        return _report(database, name), _run_state(log_path)

    first, state = harvest("clean")
    assert state == "success" and first["records_stored"] == REAL_ITEMS, first
    assert first["pages_blocked"] == 0, first
    _assert_all_right(_records(database, name), site)

    # 10 % of the items delisted each way: ids 1-5 by 410, 6-10 by 404, 11-15 soft, 16-20 home, 21-25 listing.
    per_way = REAL_ITEMS // 10
    delisted = {number: way for index, way in enumerate(DELISTING_WAYS)
                for number in range(index * per_way + 1, (index + 1) * per_way + 1)}
    for number, way in delisted.items():
        _post(f"{site.url}/_life/delist?product={number}&how={way}")
    gone, state = harvest("delisted")
    records = _records(database, name)
    assert len(records) == REAL_ITEMS  # no home page or listing stored as an item
    assert {url for url, record in records.items() if record.get("gone_at") is not None} == {
        f"{site.url}/life/shop/item/{number}" for number in delisted}
    _assert_all_right(records, site)  # the last values kept
    assert state == "success" and gone["quality"]["outcome"] == "green", gone["quality"]
    assert int(gone["tasks_failed"]) == 0 and gone["records_gone"] == len(delisted), gone

    # Every item listed again, and the WAF up: 12 requests a 3 s window, then a 200 challenge page. It relents once
    # it has served a batch's worth (8) of challenges.
    _post(f"{site.url}/_life/reset")
    served_before = _challenged(site)
    _post(f"{site.url}/_challenge?after=12&window=3&status=200")
    relented = threading.Event()

    def relent() -> None:
        while not relented.wait(0.1):
            if _challenged(site) - served_before >= 8:
                _post(f"{site.url}/_challenge")
                relented.set()

    watcher = threading.Thread(target=relent, daemon=True)
    watcher.start()
    try:
        back, state = harvest("relisted-challenged")
    finally:
        relented.set()
        watcher.join(timeout=10)
        _post(f"{site.url}/_challenge")
    served = _challenged(site) - served_before
    records = _records(database, name)
    assert not [url for url, record in records.items() if "gone_at" in record or "gone_reason" in record]
    _assert_all_right(records, site)  # 0 stored values overwritten with null, all 50 right
    # each block counted is a challenge the site served; a challenge in flight when the site relented may be
    # counted or not, but some were met and retried
    assert 0 < back["pages_blocked"] <= served, (served, back)
    assert back["records_stored"] == REAL_ITEMS and back["records_back"] == len(delisted), back
    assert state == "success" and back["quality"]["outcome"] == "green", back["quality"]
    assert sum(record["run_id"] == back["run_id"] for record in records.values()) == REAL_ITEMS

    # A WAF that does not relent within the retries (403 past the first requests): the run fails, no value lost.
    walled_seeds = seeds[:WALLED_ITEMS]
    _write_source(real_site_settings, {**document, "input": {"kind": "details", "seeds": walled_seeds},
                                       "retries": 1})
    _post(f"{site.url}/_challenge?after={WALL_AFTER}&window=600&status=403")
    try:
        walled, state = harvest("walled")
    finally:
        _post(f"{site.url}/_challenge")
    _assert_all_right(_records(database, name), site)
    assert state == "failed" and walled["quality"]["outcome"] == "failed", walled["quality"]
    assert "stayed blocked past their retries" in walled["quality"]["reason"], walled["quality"]
    assert walled["records_stored"] <= WALL_AFTER and walled["failures_by_reason"].get("blocked", 0) > 0, walled
