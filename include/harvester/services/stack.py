"""`make run`, `make stop`, `make status`: the local embedded stack on loopback.

Airflow standalone (SQLite, LocalExecutor), Redis, a MongoDB (section 8 of DESIGN.md), the demo site,
the Celery workers, a forward proxy per browser country and the distributor, declared here and run by
the launcher core (:mod:`harvester.services.launcher`): each service in its own process group with a PID
file in var/run/ and a log in var/log/, so running twice starts nothing twice and `make stop` stops
exactly what was started.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from harvester.services import catalogue, readiness
from harvester.services.catalogue import DEMO_SOURCE_DAG, CountryProxies, browser_countries, celery_worker_command
from harvester.services.launcher import VENV_BIN, Service, Supervisor, step, with_venv_on_path
from harvester.services.launcher import main as launcher_main
from harvester.services.mongo import MongoChoice, airflow_connection_uri, choose_mongo, redact
from harvester.services.ports import LOOPBACK, PortPlan
from harvester.settings import REPOSITORY_ROOT


@dataclass(frozen=True)
class StackPorts(PortPlan):
    """Each port moves with HARVESTER_RUN_<NAME>_PORT (e.g. when 8080 is taken)."""

    ENVIRONMENT_PREFIX = "HARVESTER_RUN_"
    redis: int = 6379
    mongo: int = 27017
    demo_site: int = 8008
    airflow: int = 8080
    forward_proxy: int = 3128  # the first demo country's proxy; the next countries take the next ports
    worker_logs: int = 8793  # the log servers of Airflow's scheduler (LocalExecutor tasks) and triggerer
    trigger_logs: int = 8794


class LocalStack:
    """The services of `make run`, in start order."""

    def __init__(self, root: Path = REPOSITORY_ROOT, environ: dict[str, str] | None = None) -> None:
        self.root = root
        self.environ = dict(os.environ if environ is None else environ)
        self.ports = StackPorts.from_environment(self.environ)
        self.var = root / "var"
        self.run_dir = self.var / "run"
        self.log_dir = self.var / "log"
        self.bin = VENV_BIN
        self.mongo: MongoChoice = choose_mongo(self.ports.mongo, self.var / "data", self.environ)
        self.supervisor = Supervisor(self.run_dir, self.log_dir, cwd=root)

    # -- configuration -------------------------------------------------------------------------
    @property
    def redis_url(self) -> str:
        return f"redis://{LOOPBACK}:{self.ports.redis}/0"

    @property
    def airflow_url(self) -> str:
        return f"http://{LOOPBACK}:{self.ports.airflow}"

    @property
    def demo_site_url(self) -> str:
        return f"http://{LOOPBACK}:{self.ports.demo_site}"

    @cached_property
    def proxies(self) -> CountryProxies:
        """A counting forward proxy per browser country (a configured AIRFLOW_CONN_PROXY_<C> wins: then none
        is started for that country)."""
        directory = self.environ.get("HARVESTER_SOURCES_DIR") or self.root / "include" / "sources"
        return CountryProxies(browser_countries(Path(directory)), self.environ, first_port=self.ports.forward_proxy)

    def environment(self) -> dict[str, str]:
        """The environment every service (and every Airflow task) runs with."""
        return with_venv_on_path({
            **self.environ,
            "HARVESTER_REDIS_URL": self.redis_url,
            "HARVESTER_MONGO_URI": self.mongo.uri,
            "HARVESTER_DEMO_SITE_URL": self.demo_site_url,
            # the demo site is on loopback: allow exactly its port (redirects to Redis, MongoDB or cloud
            # metadata stay refused); a deployment's own private networks go in the same variable
            "HARVESTER_ALLOWED_PRIVATE_NETWORKS": self.environ.get(
                "HARVESTER_ALLOWED_PRIVATE_NETWORKS", f"{LOOPBACK}/32:{self.ports.demo_site}"),
            **catalogue.airflow_environment(self.root, self.var / "airflow", self.ports.airflow, refresh_seconds=30,
                                            min_file_process_seconds=10),
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "4",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(self.ports.worker_logs),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(self.ports.trigger_logs),
            **self.proxies.environment(),  # the demo's proxies, as Airflow connections
        })

    def page_slot_capacity(self) -> int:
        """Slots the local slot host hosts (its pool size): HARVESTER_RUN_PAGE_SLOTS, default 2."""
        return int(self.environ.get("HARVESTER_RUN_PAGE_SLOTS", "2"))

    def services(self) -> list[Service]:
        env, port = self.environment(), StackPorts.variable
        return [
            catalogue.redis_server(self.ports.redis, self.var / "data" / "redis", env, self.redis_url, port("redis")),
            *catalogue.mongo_server(self.mongo, self.var / "data", self.ports.mongo, env, port("mongo")),
            catalogue.demo_site(self.ports.demo_site, env, port("demo_site")),
            Service("airflow", [[str(self.bin / "airflow"), "standalone"]], env, port=self.ports.airflow,
                    port_variable=port("airflow"), ready_timeout=240,
                    ready=lambda: readiness.http_ok(self.airflow_url + "/api/v2/monitor/health")),
            Service("worker-priority", [celery_worker_command("priority", "priority@%h", 2)], env),
            Service("worker-default", [celery_worker_command("default", "default@%h", 2)], env),
            *self.proxies.services(env, port("forward_proxy")),
            # a slot host: one page slot per pool process (prefork)
            Service("worker-pageslots", [celery_worker_command("pageslots", "pageslots@%h",
                                                               self.page_slot_capacity())], env),
            Service("distributor", [[str(self.bin / "harvester"), "distributor"]], env),
        ]

    # -- actions -------------------------------------------------------------------------------
    def run(self, trigger: bool = True) -> None:
        env = self.environment()
        step(f"MongoDB: {self.mongo.describe()}")
        for service in self.services():  # one after the other: each waits for the one before
            self.supervisor.start_all([service])
        self.write_environment_file(env)
        self.create_connections(env)
        if trigger:
            self.trigger_demo_dag(env)
        print(
            "\nHarvester is running.\n"
            f"  Airflow UI:     {self.airflow_url}  (local admin, no password; loopback only)\n"
            f"  Demo site:      {self.demo_site_url}\n"
            f"  Redis:          {self.redis_url}\n"
            f"  Results land in MongoDB: {redact(self.mongo.uri)} ({self.mongo.kind}), "
            "database 'harvester', one collection per source\n"
            f"  Logs:           {self.log_dir}/\n"
            f"  Environment:    source {self.run_dir / 'harvester.env'}\n"
            "  Stop:           make stop      Status: make status\n",
            flush=True,
        )

    def stop(self) -> None:
        self.supervisor.stop(self.services())

    def status(self) -> bool:
        """Print what runs; True when every service runs."""
        all_running = self.supervisor.status(self.services())
        print(f"  MongoDB: {self.mongo.describe()}")
        return all_running

    def write_environment_file(self, env: dict[str, str]) -> None:
        """``var/run/harvester.env``, owner-only (0600): it holds every password of the environment.

        Written to a private temporary file and renamed over the old one, so the secrets are never
        readable by others, not even for a moment, and an older world-readable file is replaced.
        """
        keys = sorted(k for k in env if k.startswith(("HARVESTER_", "AIRFLOW_", "AIRFLOW__")))
        lines = [f"export {key}={json.dumps(env[key])}" for key in keys]
        # so `harvester ...` and `airflow ...` run bare after `source var/run/harvester.env` (the README's way)
        lines.append(f'export PATH="{self.bin}:$PATH"')
        path = self.run_dir / "harvester.env"
        temporary = path.with_name(f".{path.name}.{os.getpid()}")
        temporary.unlink(missing_ok=True)
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            handle.write("\n".join(lines) + "\n")
        os.replace(temporary, path)

    # -- Airflow, through its command line (standalone: every user is an admin) ------------------
    def airflow(self, env: dict[str, str], *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.bin / "airflow"), *args], env=env, cwd=self.root, capture_output=True, text=True,
            check=check, timeout=180,
        )

    def create_connections(self, env: dict[str, str]) -> None:
        step("airflow: creating connections mongo_default and redis_default")
        connections = {"mongo_default": airflow_connection_uri(self.mongo.uri), "redis_default": self.redis_url}
        for conn_id, uri in connections.items():
            self.airflow(env, "connections", "delete", conn_id, check=False)
            result = self.airflow(env, "connections", "add", conn_id, "--conn-uri", uri, check=False)
            if result.returncode != 0:
                print(f"  ! could not create {conn_id}: {result.stderr.strip()[-400:]}", flush=True)

    def trigger_demo_dag(self, env: dict[str, str], timeout: float = 180.0) -> None:
        step(f"airflow: waiting for {DEMO_SOURCE_DAG} to be parsed, then triggering it")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            listed = self.airflow(env, "dags", "list", "-o", "json", check=False)
            if listed.returncode == 0 and DEMO_SOURCE_DAG in listed.stdout:
                if self.manual_runs(env) > 0:
                    step(f"airflow: {DEMO_SOURCE_DAG} was already triggered; not triggering it again")
                    return
                result = self.airflow(env, "dags", "trigger", DEMO_SOURCE_DAG, check=False)
                if result.returncode == 0:
                    step(f"airflow: triggered {DEMO_SOURCE_DAG}")
                else:
                    print(f"  ! trigger failed: {result.stderr.strip()[-400:]}", flush=True)
                return
            time.sleep(5)
        print(f"  ! {DEMO_SOURCE_DAG} did not appear within {timeout:.0f}s; see var/log/airflow.log", flush=True)

    def manual_runs(self, env: dict[str, str]) -> int:
        """How many manual runs the demo DAG has, so a second `make run` does not trigger it again."""
        listed = self.airflow(env, "dags", "list-runs", DEMO_SOURCE_DAG, "-o", "json", check=False)
        # Airflow may print warnings before the JSON: the runs are the last line that is a list.
        lists = [line for line in listed.stdout.splitlines() if line.startswith(("[{", "[]"))]
        if listed.returncode != 0 or not lists:
            return 0
        try:
            runs = json.loads(lists[-1])
        except json.JSONDecodeError:
            return 0
        return sum(1 for run in runs if str(run.get("run_id", "")).startswith("manual__"))


def main(argv: list[str] | None = None) -> int:
    return launcher_main(LocalStack, "python -m harvester.services.stack", __doc__, argv)


if __name__ == "__main__":
    raise SystemExit(main())
