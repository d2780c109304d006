"""The plugin in a real `airflow api-server`: it is listed, its API gives the figures of a seeded state,
and Airflow's own security answers 401 without a session or token and 403 to a viewer's requeue."""

from __future__ import annotations

import csv
import io
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from harvester.distributor import DeadLetters, Intake, RateLimitStore, TaskMessage
from harvester.producer.health import publish_health
from harvester.services.ports import free_port
from harvester.settings import REPOSITORY_ROOT, HarvesterSettings, get_settings
from harvester.storage.packages import PackageStore
from harvester.storage.runs import RunStore
from harvester.storage.snapshots import SnapshotStore

from tests.fixtures.demo_site import demo_source_document
from tests.fixtures.servers import VENV_BIN, MongoServer, RedisServer
from tests.observability.airflow_server import (
    AirflowServer,
    airflow_environment,
    shared_harvester_environment,
    start_api_server,
)

pytestmark = [pytest.mark.integration, pytest.mark.airflow, pytest.mark.slow]
SOURCE = "seeded"


@pytest.fixture(scope="module")
def plugin_environment(redis_server: RedisServer, mongo_server: MongoServer,
                       tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The settings this file's api-server and tests share (module-scoped with the server: starting one takes
    most of a test's time); each test seeds its state afresh (see ``plugin_settings``)."""
    sources = tmp_path_factory.mktemp("plugin-api-sources")
    document = demo_source_document("http://127.0.0.1:9", SOURCE, rate_limit={"max_active": 5, "per_minute": 50})
    (sources / f"{SOURCE}.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    with shared_harvester_environment(redis_server.url, mongo_server, sources) as environment:
        yield environment


@pytest.fixture(scope="module")
def module_api_server(plugin_environment: dict[str, str], tmp_path_factory: pytest.TempPathFactory,
                      migrated_airflow_database: Path) -> Iterator[AirflowServer]:
    server = start_api_server(tmp_path_factory.mktemp("plugin-api-airflow"), migrated_airflow_database,
                              **plugin_environment)
    yield server
    server.server.stop()


@pytest.fixture
def plugin_settings(plugin_environment: dict[str, str], redis_client, mongo_server: MongoServer,
                    monkeypatch: pytest.MonkeyPatch) -> Iterator[HarvesterSettings]:
    """The file's settings in this process too, over an emptied Redis (``redis_client``) and MongoDB database."""
    for name, value in plugin_environment.items():
        monkeypatch.setenv(name, value)
    with mongo_server.client() as client:
        client.drop_database(plugin_environment["HARVESTER_MONGO_DATABASE"])
    get_settings.cache_clear()
    yield get_settings()
    get_settings.cache_clear()


@pytest.fixture
def api_server(plugin_settings: HarvesterSettings, module_api_server: AirflowServer) -> AirflowServer:
    return module_api_server


def test_airflow_plugins_lists_the_plugin(tmp_path) -> None:
    env = airflow_environment(tmp_path / "airflow", free_port())
    listed = subprocess.run([str(VENV_BIN / "airflow"), "plugins", "--output", "json"], env=env, cwd=REPOSITORY_ROOT,
                            capture_output=True, text=True, timeout=120, check=True)
    assert '"name": "harvester"' in listed.stdout, listed.stdout + listed.stderr
    assert "/harvester" in listed.stdout and "Harvest progress" in listed.stdout


JPEG = b"\xff\xd8\xff\xe0" + b"snapshot" * 16


def seed(settings, redis_client, mongo_server) -> dict:
    """5 tasks pushed, 3 admitted, 1 of them dead-lettered; a run with 2 packages; 3 stored records."""
    from harvester.config.loader import get_source

    source = get_source(SOURCE, settings.sources_dir)
    store = RateLimitStore(redis_client, settings)
    messages = [TaskMessage(source=SOURCE, url=f"http://127.0.0.1:9/product/{i}", run_id="run-1", package_id=0)
                for i in range(5)]
    Intake(redis_client, settings).push(source, messages)
    admitted = store.admit(SOURCE, 3)
    for _ in admitted.messages:  # the admitted tasks' requests start (per_minute counts fetch starts)
        assert store.acquire_fetch(SOURCE) == 0.0
    # the worker that held the first task dead-letters it under its lease token (fenced leases)
    assert store.reject(SOURCE, admitted.messages[0], "http_404: HTTP 404", token=admitted.tokens[0])
    publish_health(redis_client, SOURCE, {"attributes": {
        "price": {"share": 0.1, "median": 0.95, "drop": 85.0, "drift": True},
        "title": {"share": 1.0, "median": 1.0, "drop": 0.0, "drift": False}}})
    database = mongo_server.client()[settings.mongo_database]
    runs = RunStore(database)
    started = datetime.now(UTC) - timedelta(minutes=2)
    runs.start(SOURCE, "run-0", started - timedelta(hours=6))  # an earlier run, reported failed by its data
    runs.record_report(SOURCE, "run-0", {
        "complete": True, "urls_planned": 10, "records_stored": 1, "shares": {"rejected": 0.9},
        "rejections": {"sku": {"missing": 9}},
        "quality": {"outcome": "failed", "reason": "90 % of pages rejected: sku missing on 9 of 10",
                    "breached": True}})
    runs.start(SOURCE, "run-1", started)
    runs.adopt(SOURCE, "run-1", "manual__airflow-1")
    packages = PackageStore(database)
    packages.ensure_indexes()
    packages.create_packages(SOURCE, "run-1", [(0, [m.url for m in messages[:3]]), (1, [m.url for m in messages[3:]])])
    output = database[source.output_collection]
    harvested = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    output.insert_many([
        {"url": f"http://127.0.0.1:9/product/{i}", "sku": f"SKU-{i}", "run_id": "run-1" if i < 2 else "run-0",
         "title": f'=HYPERLINK("http://evil.example/{i}","a site wrote this")',
         "harvested_at": harvested + timedelta(hours=i)} for i in range(3)])
    # the run's fetches over three site hosts, as a batch records them: b.test is the slowest, c.test paused
    from harvester.metrics.recording import record_fetches
    from harvester.redis_keys import SourceKeys
    from harvester.scraping.fetching.fetcher import FetchResult

    fetched = [TaskMessage(source=SOURCE, url=f"http://{host}/p", run_id="run-1") for host in ("a.test", "b.test",
                                                                                                 "c.test")]
    record_fetches(redis_client, SOURCE, fetched, [FetchResult(m.url, "ok", status=200, elapsed=elapsed)
                                                   for m, elapsed in zip(fetched, (0.1, 2.0, 0.3), strict=True)])
    redis_client.hset(SourceKeys(SOURCE).host_paused, "c.test", float(redis_client.time()[0]) + 300)
    dead_task = TaskMessage.from_json(admitted.messages[0]).task_id
    # its page's snapshot, as a slot keeps one for a failed browser page (docs/pageslots.md, "Evidence")
    SnapshotStore(database).save(SOURCE, dead_task, "http://127.0.0.1:9/product/0", "http_404: HTTP 404",
                                 "<h1>Not found</h1><script>alert(document.cookie)</script>", JPEG)
    return {"dead_task": dead_task}


def test_api_returns_the_figures_of_a_seeded_state(api_server, plugin_settings, redis_client, mongo_server) -> None:
    seeded = seed(plugin_settings, redis_client, mongo_server)
    with api_server.client("watcher") as client:
        sources = client.get("/harvester/api/sources")
        assert sources.status_code == 200, sources.text + api_server.log_tail()
        (summary,) = [entry for entry in sources.json() if entry["name"] == SOURCE]
        assert summary["pending"] == 2 and summary["active"] == 2 and summary["max_active"] == 5
        assert summary["started_last_minute"] == 3 and summary["per_minute"] == 50
        assert summary["dead_letters"] == 1 and summary["dag_id"] == "harvest_seeded"
        assert summary["selector_drift"] == ["price"] and summary["drift_threshold"] == 20
        assert summary["last_run"]["run_id"] == "run-1" and summary["last_run"]["outcome"] == "running"
        hosts = summary["hosts"]  # the run's site hosts: counted, the slowest named, no list of every host
        assert (hosts["hosts"], hosts["done"], hosts["paused"]) == (3, 2, 1)
        assert [entry["host"] for entry in hosts["slowest"]] == ["b.test", "c.test", "a.test"]
        one = client.get(f"/harvester/api/sources/{SOURCE}").json()
        assert one.pop("paused_hosts").keys() == summary.pop("paused_hosts").keys()  # seconds left: a moment later
        assert one == summary
        assert client.get("/harvester/api/sources/nothing").status_code == 404

        dead = client.get(f"/harvester/api/sources/{SOURCE}/dead-letters").json()
        assert dead["total"] == 1 and dead["entries"][0]["task_id"] == seeded["dead_task"]
        assert dead["entries"][0]["reason"] == "http_404: HTTP 404" and dead["entries"][0]["snapshot"] is True
        evidence = f"/harvester/api/sources/{SOURCE}/dead-letters/{seeded['dead_task']}"
        html = client.get(f"{evidence}/snapshot")
        assert html.status_code == 200 and "<h1>Not found</h1>" in html.text
        assert html.headers["content-security-policy"].startswith("sandbox")  # its scripts never run here
        shot = client.get(f"{evidence}/screenshot")
        assert shot.status_code == 200 and shot.headers["content-type"] == "image/jpeg" and shot.content == JPEG
        assert client.get(f"/harvester/api/sources/{SOURCE}/dead-letters/nothing/snapshot").status_code == 404

        runs = client.get(f"/harvester/api/sources/{SOURCE}/runs").json()
        assert [run["run_id"] for run in runs] == ["run-1", "run-0"]
        running, failed = runs
        assert running["outcome_words"] == "running" and running["progress"]["packages_total"] == 2
        assert failed["outcome"] == "failed" and failed["outcome_words"] == "failed"
        assert failed["reason"] == "90 % of pages rejected: sku missing on 9 of 10" and failed["rejected_share"] == 0.9
        records = client.get(f"/harvester/api/sources/{SOURCE}/runs/run-0/records").json()
        assert [record["sku"] for record in records["records"]] == ["SKU-2"] and records["records_stored"] == 1
        assert records["outcome"] == "failed" and records["rejections_by_attribute"] == {"sku": {"missing": 9}}
        live = client.get(f"/harvester/api/sources/{SOURCE}/runs/run-1/records").json()
        assert [entry["task_id"] for entry in live["rejections"]] == [seeded["dead_task"]]
        progress = client.get(f"/harvester/api/sources/{SOURCE}/runs/run-1/progress").json()
        assert progress["packages_total"] == 2 and progress["tasks_pending"] == 5 and not progress["complete"]
        assert progress["elapsed_seconds"] >= 110 and progress["pages_per_minute"] == 0
        assert progress["hosts"] == hosts and "hosts 2/3 done (1 paused)" in progress["line"]
        by_airflow_run = client.get("/harvester/api/dag-runs/harvest_seeded/manual__airflow-1/progress").json()
        assert by_airflow_run["run_id"] == "run-1"

        first = client.get(f"/harvester/api/results/{SOURCE}", params={"limit": 2}).json()
        assert [record["sku"] for record in first["records"]] == ["SKU-0", "SKU-1"] and first["next_cursor"]
        rest = client.get(f"/harvester/api/results/{SOURCE}", params={"limit": 2, "cursor": first["next_cursor"]})
        assert [record["sku"] for record in rest.json()["records"]] == ["SKU-2"]
        assert rest.json()["next_cursor"] is None
        by_run = client.get(f"/harvester/api/results/{SOURCE}", params={"run_id": "run-0"}).json()
        assert [record["sku"] for record in by_run["records"]] == ["SKU-2"]
        window = client.get(f"/harvester/api/results/{SOURCE}", params={
            "harvested_after": "2026-11-30T13:00:00Z", "harvested_before": "2026-11-30T14:00:00Z"}).json()
        assert [record["sku"] for record in window["records"]] == ["SKU-1"]
        assert client.get(f"/harvester/api/results/{SOURCE}", params={"cursor": "bad!"}).status_code == 400
        from harvester.config.loader import get_source

        collection = get_source(SOURCE, plugin_settings.sources_dir).output_collection
        output = mongo_server.client()[plugin_settings.mongo_database][collection]
        output.update_one({"sku": "SKU-1"}, {"$set": {"gone_at": datetime(2026, 12, 1, tzinfo=UTC),
                                                      "gone_reason": "HTTP 410"}})
        gone = client.get(f"/harvester/api/results/{SOURCE}", params={"gone": "true"}).json()
        assert [(record["sku"], record["gone_reason"]) for record in gone["records"]] == [("SKU-1", "HTTP 410")]
        still = client.get(f"/harvester/api/results/{SOURCE}", params={"gone": "false"}).json()
        assert [record["sku"] for record in still["records"]] == ["SKU-0", "SKU-2"]

        schema = client.get("/harvester/openapi.json").json()
        for path in ("/api/sources", "/api/sources/{source}", "/api/sources/{source}/runs",
                     "/api/sources/{source}/runs/{run_id}/progress", "/api/slots", "/api/sources/{source}/dead-letters",
                     "/api/sources/{source}/dead-letters/requeue", "/api/results/{source}", "/api/jobs",
                     "/api/sources/{source}/runs/{run_id}/records"):
            assert path in schema["paths"], path
        page = client.get("/harvester/ui/")
        assert page.status_code == 200 and "Harvester" in page.text
        assert client.get("/harvester/static/chart.umd.min.js").status_code == 200


def test_unauthenticated_get_401_and_a_viewer_cannot_requeue(api_server, plugin_settings, redis_client,
                                                            mongo_server) -> None:
    seed(plugin_settings, redis_client, mongo_server)
    with api_server.client() as anonymous:
        for method, path in (("GET", "/harvester/api/sources"), ("GET", f"/harvester/api/sources/{SOURCE}"),
                             ("GET", "/harvester/api/slots"), ("GET", f"/harvester/api/results/{SOURCE}"),
                             ("GET", f"/harvester/api/sources/{SOURCE}/dead-letters"),
                             ("GET", f"/harvester/api/sources/{SOURCE}/dead-letters/any/snapshot"),
                             ("POST", f"/harvester/api/sources/{SOURCE}/dead-letters/requeue"),
                             ("POST", "/harvester/api/jobs"), ("GET", "/harvester/ui/")):
            response = anonymous.request(method, path, json={"source": SOURCE, "urls": ["http://127.0.0.1:9/"]})
            assert response.status_code == 401, (method, path, response.status_code, response.text)
        forged = anonymous.get("/harvester/api/sources", headers={"Authorization": "Bearer not-a-token"})
        assert forged.status_code in (401, 403)
    with api_server.client("watcher") as watcher:
        assert watcher.get("/harvester/api/sources").status_code == 200
        refused = watcher.post(f"/harvester/api/sources/{SOURCE}/dead-letters/requeue")
        assert refused.status_code == 403, refused.text
        assert watcher.post("/harvester/api/jobs", json={"source": SOURCE, "urls": ["http://127.0.0.1:9/"]}
                            ).status_code == 403
    assert DeadLetters(redis_client).count(SOURCE) == 1
    with api_server.client("operator") as operator:
        allowed = operator.post(f"/harvester/api/sources/{SOURCE}/dead-letters/requeue")
        assert allowed.status_code == 200, allowed.text + api_server.log_tail()
        assert allowed.json() == {"source": SOURCE, "requeued": 1, "remaining": 0}
    assert DeadLetters(redis_client).count(SOURCE) == 0


def test_results_download_in_each_format_needs_the_results_route_access(api_server, plugin_settings, redis_client,
                                                                        mongo_server, tmp_path) -> None:
    """The records as jsonl, csv and parquet downloads, read back with their types."""
    from harvester.config.loader import get_source
    from harvester.storage.exports import read_csv, read_jsonl, read_parquet

    seed(plugin_settings, redis_client, mongo_server)
    source = get_source(SOURCE, plugin_settings.sources_dir)
    path = f"/harvester/api/results/{SOURCE}/export"
    with api_server.client() as anonymous:
        assert anonymous.get(path, params={"format": "csv"}).status_code == 401
    with api_server.client("watcher") as client:
        readers = (("jsonl", read_jsonl), ("csv", lambda file: read_csv(source, file)), ("parquet", read_parquet))
        for fmt, read in readers:
            response = client.get(path, params={"format": fmt, "run_id": "run-1"})
            assert response.status_code == 200, response.text + api_server.log_tail()
            assert response.headers["x-harvester-records"] == "2"
            assert f'filename="{SOURCE}-run-1.{fmt}"' in response.headers["content-disposition"]
            (tmp_path / f"download.{fmt}").write_bytes(response.content)
            records = read(tmp_path / f"download.{fmt}")
            assert sorted(record["sku"] for record in records) == ["SKU-0", "SKU-1"], fmt
            assert all(record["harvested_at"].tzinfo is not None for record in records), fmt
        for formulas, first in (("escaped", "'="), ("raw", "=")):  # a site's text is never run by a spreadsheet
            download = client.get(path, params={"format": "csv", "run_id": "run-1", "csv_formulas": formulas}).text
            titles = [row["title"] for row in csv.DictReader(io.StringIO(download))]
            assert len(titles) == 2 and all(title.startswith(f"{first}HYPERLINK(") for title in titles), titles
        assert client.get(path, params={"format": "xml"}).status_code == 422
        assert client.get("/harvester/api/results/nothing/export").status_code == 404
        assert "/api/results/{source}/export" in client.get("/harvester/openapi.json").json()["paths"]
