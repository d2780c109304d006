"""The plugin's authorisation in a real `airflow api-server`: a viewer limited to one DAG reads only
that source (every source-scoped read checks access to harvest_<source>, the lists are filtered), the
docs, the OpenAPI schema and the static files need a login, the requeue POST needs a bearer token or the
page's own header (a session cookie alone, which a cross-site form would carry, is refused), and the nav links
are relative, so they work under a sub-path. Each failed on the code before the fix."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urljoin

import httpx
import pytest
import yaml
from harvester.distributor import DeadLetters, Intake, RateLimitStore, TaskMessage
from harvester.services import readiness
from harvester.services.ports import LOOPBACK, free_port
from harvester.settings import get_settings

from tests.fixtures.airflow_db import with_migrated_database
from tests.fixtures.demo_site import demo_source_document
from tests.fixtures.servers import VENV_BIN, MongoServer, RedisServer, ServerProcess
from tests.observability.airflow_server import USERS, AirflowServer, airflow_environment, shared_harvester_environment

pytestmark = [pytest.mark.integration, pytest.mark.airflow, pytest.mark.slow]
SUB_PATH = "/airflow"
TESTS_ROOT = Path(__file__).resolve().parents[2]  # where the test auth manager is imported from
MINE, OTHER = "mine", "other"


@pytest.fixture(scope="module")
def plugin_environment(redis_server: RedisServer, mongo_server: MongoServer,
                       tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The HARVESTER_* settings the api-server and every test of this file share: the test servers, a sources
    directory holding the two sources and a MongoDB database of this file's own (dropped after).

    Module-scoped with the server below: starting an api-server takes most of a test's time, and what each test
    checks is authorisation against the same two sources; each test still gets its Redis state afresh."""
    sources = tmp_path_factory.mktemp("plugin-access-sources")
    for name in (MINE, OTHER):
        document = demo_source_document("http://127.0.0.1:9", name)
        (sources / f"{name}.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    with shared_harvester_environment(redis_server.url, mongo_server, sources) as environment:
        yield environment


@pytest.fixture(scope="module")
def module_api_server(plugin_environment: dict[str, str], tmp_path_factory: pytest.TempPathFactory,
                      migrated_airflow_database: Path) -> Iterator[AirflowServer]:
    """The api-server under /airflow (its clients' base URL ends there), with the watcher limited to harvest_mine."""
    home = with_migrated_database(migrated_airflow_database, tmp_path_factory.mktemp("plugin-access-airflow"))
    port = free_port()
    base_url = f"http://{LOOPBACK}:{port}{SUB_PATH}"
    env = airflow_environment(home, port, AIRFLOW__API__BASE_URL=base_url,
                              AIRFLOW__CORE__AUTH_MANAGER="tests.observability.one_dag_auth_manager.OneDagAuthManager",
                              HARVESTER_TEST_DAG_ACCESS=json.dumps({"watcher": [f"harvest_{MINE}"]}),
                              PYTHONPATH=os.pathsep.join([str(TESTS_ROOT), os.environ.get("PYTHONPATH", "")]),
                              **plugin_environment)
    server = ServerProcess("airflow api-server", [str(VENV_BIN / "airflow"), "api-server", "--host", LOOPBACK,
                                                  "--port", str(port)], home / "api-server.log", env=env,
                           ready=lambda: readiness.http_ok(f"{base_url}/api/v2/monitor/health"))
    server.start(timeout=180)
    yield AirflowServer(server, base_url, home)
    server.stop()


@pytest.fixture
def two_sources(plugin_environment: dict[str, str], redis_client, monkeypatch: pytest.MonkeyPatch):
    """This file's settings for the test process too, and one dead letter of each source in the emptied Redis."""
    for name, value in plugin_environment.items():
        monkeypatch.setenv(name, value)
    get_settings.cache_clear()
    settings = get_settings()
    from harvester.config.loader import get_source

    for name in (MINE, OTHER):  # one dead letter each
        source = get_source(name, settings.sources_dir)
        Intake(redis_client, settings).push(source, [TaskMessage(source=name, url=f"http://127.0.0.1:9/{name}")])
        store = RateLimitStore(redis_client, settings)
        admitted = store.admit(name, 1)
        store.reject(name, admitted.messages[0], "http_404: HTTP 404", token=admitted.tokens[0])
    yield settings
    get_settings.cache_clear()


@pytest.fixture
def sub_path_server(two_sources, module_api_server: AirflowServer) -> AirflowServer:
    """The file's api-server, with this test's dead letters in place."""
    return module_api_server


def test_a_viewer_of_one_dag_reads_only_that_source(sub_path_server: AirflowServer) -> None:
    with sub_path_server.client("watcher") as watcher:
        listed = watcher.get("/harvester/api/sources")
        assert listed.status_code == 200, listed.text + sub_path_server.log_tail()
        assert [entry["name"] for entry in listed.json()] == [MINE]
        assert watcher.get(f"/harvester/api/sources/{MINE}/dead-letters").json()["total"] == 1
        for path in (f"/api/sources/{OTHER}", f"/api/sources/{OTHER}/runs", f"/api/sources/{OTHER}/dead-letters",
                     f"/api/sources/{OTHER}/runs/run-1/progress", f"/api/sources/{OTHER}/runs/run-1/records",
                     f"/api/results/{OTHER}",
                     f"/api/dag-runs/harvest_{OTHER}/manual__1/progress"):
            response = watcher.get(f"/harvester{path}")
            assert response.status_code == 403, (path, response.status_code, response.text)
    with sub_path_server.client("operator") as operator:
        assert sorted(entry["name"] for entry in operator.get("/harvester/api/sources").json()) == [
            MINE, OTHER]


def test_docs_schema_and_static_files_need_a_login(sub_path_server: AirflowServer) -> None:
    with sub_path_server.client() as anonymous:
        for path in ("/openapi.json", "/docs", "/redoc", "/static/harvester.js", "/static/icon.svg"):
            response = anonymous.get(f"/harvester{path}")
            assert response.status_code in (401, 404), (path, response.status_code)
    with sub_path_server.client("watcher") as watcher:
        assert watcher.get("/harvester/static/harvester.js").status_code == 200


def test_the_requeue_post_needs_a_bearer_token_or_the_pages_header(sub_path_server: AirflowServer,
                                                                  redis_client) -> None:
    token = sub_path_server.token("operator")
    path = f"{sub_path_server.base_url}/harvester/api/sources/{MINE}/dead-letters/requeue"
    with httpx.Client(cookies={"_token": token}, timeout=30) as session:  # the UI's session cookie only
        assert session.get(f"{sub_path_server.base_url}/harvester/api/sources").status_code == 200
        forged = session.post(path)  # what a cross-site form submits: the cookie, no header of ours
        assert forged.status_code == 403, forged.text
        assert DeadLetters(redis_client).count(MINE) == 1
        from_the_page = session.post(path, headers={"X-Harvester-Request": "1"})
        assert from_the_page.status_code == 200, from_the_page.text
    assert DeadLetters(redis_client).count(MINE) == 0


def test_the_nav_links_work_under_a_sub_path(sub_path_server: AirflowServer) -> None:
    with sub_path_server.client("watcher") as watcher:
        plugins = watcher.get("/api/v2/plugins")
        assert plugins.status_code == 200, plugins.text
        [harvester] = [plugin for plugin in plugins.json()["plugins"] if plugin["name"] == "harvester"]
        base = f"{sub_path_server.base_url}/"  # the UI's <base href>, which relative links resolve against
        for view in harvester["external_views"]:
            for link in (view["href"], view.get("icon")):
                if not link:
                    continue
                assert not link.startswith("/"), link
                target = urljoin(base, link.replace("{DAG_ID}", f"harvest_{MINE}").replace("{RUN_ID}", "r"))
                assert watcher.get(target).status_code == 200, target
    assert set(USERS) >= {"watcher", "operator"}


def _route_paths_of_one_source() -> list[tuple[str, str]]:
    """Every route of the plugin's app that names one source (in its path or as the DAG id), with its method,
    read from the app itself: a route added later without the DAG check fails the test below."""
    from fastapi.routing import APIRoute
    from harvester.airflow.plugin import app

    filled = {"{source}": OTHER, "{run_id}": "run-1", "{task_id}": "task-1", "{dag_id}": f"harvest_{OTHER}",
              "{dag_run_id}": "manual__1"}
    walked = []
    for route in app.routes:
        if not isinstance(route, APIRoute) or not ("{source}" in route.path or "{dag_id}" in route.path):
            continue
        path = route.path
        for placeholder, value in filled.items():
            path = path.replace(placeholder, value)
        walked.extend((method, path) for method in sorted(route.methods))
    return walked


def test_every_route_of_one_source_refuses_a_user_without_access_to_its_dag(sub_path_server: AirflowServer,
                                                                           redis_client) -> None:
    """The watcher may read harvest_mine only: to every route about the other source (the export included, in
    each format) the auth manager says no, so each answers 403 and reads nothing."""
    walked = _route_paths_of_one_source()
    assert ("GET", f"/api/results/{OTHER}/export") in walked and len(walked) >= 10, walked
    with sub_path_server.client("watcher") as watcher:
        for method, path in walked:
            formats = ("jsonl", "csv", "parquet") if path.endswith("/export") else (None,)
            for export_format in formats:
                response = watcher.request(method, f"/harvester{path}", headers={"X-Harvester-Request": "1"},
                                           params={"format": export_format} if export_format else None)
                assert response.status_code == 403, (method, path, export_format, response.status_code,
                                                     response.text[:200])
    assert DeadLetters(redis_client).count(OTHER) == 1  # the requeue POST changed nothing
