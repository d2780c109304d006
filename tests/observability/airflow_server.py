"""A real Airflow (api-server, or standalone) with the simple auth manager and two users of different roles.

``operator`` has the role ``user`` (may edit and trigger DAGs), ``watcher`` the role ``viewer`` (reads only),
so a test can see Airflow's own authorisation at work on the plugin's routes.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
from harvester.services import readiness
from harvester.services.ports import LOOPBACK, free_port, free_ports
from harvester.settings import REPOSITORY_ROOT

from tests.fixtures.airflow_db import with_migrated_database
from tests.fixtures.servers import VENV_BIN, MongoServer, ServerProcess

USERS = {"operator": ("user", "operator-password"), "watcher": ("viewer", "watcher-password")}


@dataclass
class AirflowServer:
    server: ServerProcess
    base_url: str
    home: Path

    def token(self, username: str) -> str:
        response = httpx.post(f"{self.base_url}/auth/token", timeout=30,
                              json={"username": username, "password": USERS[username][1]})
        response.raise_for_status()
        return response.json()["access_token"]

    def client(self, username: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.token(username)}"} if username else {}
        return httpx.Client(base_url=self.base_url, headers=headers, timeout=30)

    def log_tail(self) -> str:
        return self.server.log_path.read_text(errors="replace")[-4000:] if self.server.log_path.exists() else ""


def trigger_run(client: httpx.Client, runs_path: str, attempts: int = 10) -> str:
    """POST a DAG run to ``runs_path`` (``…/dags/DAG/dagRuns`` under the client's base) and return its id.

    `airflow standalone` keeps its metadata in SQLite, one writer at a time: under the suite's load the API
    answers 500 ("database is locked") now and then, as Airflow says SQLite does. The trigger is tried again
    then, as an operator would press the button again; any other answer is the test's.
    """
    for _ in range(attempts):
        response = client.post(runs_path, json={"logical_date": None, "conf": {}})
        if response.status_code < 500:
            break
        time.sleep(2)
    assert response.status_code in (200, 201), response.text
    return response.json()["dag_run_id"]


def airflow_environment(home: Path, port: int, **extra: str) -> dict[str, str]:
    """Airflow's settings for a test's own instance on loopback.

    The log servers get free ports too: `airflow standalone` serves task logs on 8793 and triggerer logs on
    8794 by default, so two standalone tests on two xdist workers collided there and one instance died.

    The SQLite database keeps sqlite3's 5 s wait for another writer's lock. `airflow standalone` runs four
    writers on one file, and under the suite's load a wait ran out once (the API answered a trigger with 500,
    "database is locked"); :func:`trigger_run` tries again then. A 60 s wait was worse: a request waited past
    its client's 30 s, and so did the task runner's own call to the execution API, which failed the task.
    """
    base_url = f"http://{LOOPBACK}:{port}"
    worker_log_port, trigger_log_port = free_ports(2, besides=[port])
    home.mkdir(parents=True, exist_ok=True)
    passwords = home / "passwords.json"
    passwords.write_text(json.dumps({name: password for name, (_, password) in USERS.items()}))
    return {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPOSITORY_ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPOSITORY_ROOT / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": ",".join(f"{name}:{role}" for name, (role, _) in USERS.items()),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{base_url}/execution/",
        "AIRFLOW__API__HOST": LOOPBACK,
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__BASE_URL": base_url,
        "AIRFLOW__API_AUTH__JWT_SECRET": "harvester-tests-only-secret-of-enough-length",
        "AIRFLOW__API__SECRET_KEY": "harvester-tests-only",
        "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(worker_log_port),
        "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(trigger_log_port),
        "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        **extra,
    }


@contextmanager
def shared_harvester_environment(redis_url: str, mongo_server: MongoServer,
                                 sources_dir: Path) -> Iterator[dict[str, str]]:
    """HARVESTER_* settings for an api-server that several tests of a file share (a module-scoped fixture): the
    test servers, a sources directory and a MongoDB database of the file's own, dropped on leaving. Each test
    exports the same values in its own process (monkeypatch) and empties Redis and the database before seeding
    its state."""
    environment = {"HARVESTER_REDIS_URL": redis_url, "HARVESTER_MONGO_URI": mongo_server.uri,
                   "HARVESTER_MONGO_DATABASE": f"test_shared_{uuid.uuid4().hex[:12]}",
                   "HARVESTER_SOURCES_DIR": str(sources_dir)}
    try:
        yield environment
    finally:
        with mongo_server.client() as client:
            client.drop_database(environment["HARVESTER_MONGO_DATABASE"])


def start_api_server(home: Path, migrated_database: Path, **extra: str) -> AirflowServer:
    """`airflow api-server` alone (enough for the plugin's routes) on a copy of the migrated database; ``extra``
    overrides the environment (else the HARVESTER_* variables exported when called)."""
    port = free_port()
    env = airflow_environment(home, port, **extra)
    with_migrated_database(migrated_database, home)
    base_url = f"http://{LOOPBACK}:{port}"
    server = ServerProcess("airflow api-server",
                           [str(VENV_BIN / "airflow"), "api-server", "--host", LOOPBACK, "--port", str(port)],
                           home / "api-server.log", env=env,
                           ready=lambda: readiness.http_ok(f"{base_url}/api/v2/monitor/health"))
    server.start(timeout=180)
    return AirflowServer(server, base_url, home)


@contextmanager
def standalone_airflow_and_distributor(directory: Path) -> Iterator[str]:
    """`airflow standalone` (scheduler, dag-processor, triggerer, api-server; LocalExecutor, DAGs unpaused,
    every user an admin, DAG files read again every 5 s) and a Harvester distributor beside it, for a test that
    drives harvests through the REST API: the API's base URL, both stopped after. Logs in ``directory``."""
    port = free_port()
    base_url = f"http://{LOOPBACK}:{port}"
    env = airflow_environment(directory / "airflow", port, AIRFLOW__CORE__EXECUTOR="LocalExecutor",
                              AIRFLOW__CORE__PARALLELISM="4", AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION="False",
                              AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS="True",
                              AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL="5",
                              AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL="5",
                              AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC="1")
    airflow = ServerProcess("airflow standalone", [str(VENV_BIN / "airflow"), "standalone"],
                            directory / "standalone.log", env=env,
                            ready=lambda: readiness.http_ok(f"{base_url}/api/v2/monitor/health"))
    distributor = ServerProcess("distributor", [str(VENV_BIN / "harvester"), "distributor"],
                                directory / "distributor.log", ready=lambda: True, env=dict(os.environ))
    airflow.start(timeout=360)
    try:
        distributor.start(timeout=30)
        yield base_url
    finally:
        distributor.stop()
        airflow.stop()
