"""The production topology of docker-compose.yaml on one machine, on loopback, without Docker.

PostgreSQL (the Debian package, a private cluster), Redis with a password, MongoDB, the demo site,
Airflow with the CeleryExecutor as separate processes (``airflow db migrate``, api-server, scheduler,
dag-processor, triggerer, ``airflow celery worker``), the distributor, and Harvester worker *machines*:
process groups with node names of their own, running the commands compose runs. The topology test
(tests/services/test_cluster_topology.py) and ``make run MODE=cluster`` both use this module, so what
users try is what CI proves.

This module declares the services and their environments; the launcher core
(:mod:`harvester.services.launcher`) runs them: a PID file under ``<base>/run`` per service (for a worker
machine: its process group) and a log under ``<base>/log``, so a second start starts nothing twice and ``stop``
stops exactly what was started.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from urllib.parse import urlsplit

from harvester.connections import RedisTarget, celery_broker, format_sentinels
from harvester.errors import ClusterError
from harvester.queues import PAGESLOTS_QUEUE
from harvester.services import catalogue, readiness
from harvester.services.airflow_api import AirflowApi
from harvester.services.catalogue import (
    CELERY_APP,
    DEMO_SOURCE_DAG,
    CountryProxies,
    SentinelPlan,
    browser_countries,
    celery_worker_command,
)
from harvester.services.launcher import (
    VENV_BIN,
    Service,
    Supervisor,
    TimedSteps,
    with_venv_on_path,
    write_private_file,
)
from harvester.services.launcher import main as launcher_main
from harvester.services.mongo import airflow_connection_uri, choose_mongo, redact
from harvester.services.ports import LOOPBACK, PortPlan
from harvester.services.postgres import PostgresServer, data_directory
from harvester.settings import REPOSITORY_ROOT, HarvesterSettings

__all__ = ["CELERY_APP", "Cluster", "ClusterError", "ClusterPorts", "ClusterSecrets", "WorkerMachine", "main"]

AIRFLOW_USER = "admin"
POSTGRES_USER = "airflow"
SENTINELS = 3  # a majority (quorum 2) survives the loss of one sentinel


@dataclass(frozen=True)
class ClusterPorts(PortPlan):
    """Defaults beside `make run`'s (so both can run at once); each moves with HARVESTER_CLUSTER_<NAME>_PORT."""

    ENVIRONMENT_PREFIX = "HARVESTER_CLUSTER_"
    postgres: int = 5433
    redis: int = 6380  # the first primary; the sentinels may promote the replica in its place
    redis_replica: int = 6381
    sentinel_1: int = 26380  # the three Redis Sentinels
    sentinel_2: int = 26381
    sentinel_3: int = 26382
    mongo: int = 27018
    airflow: int = 8081
    demo_site: int = 8009
    scheduler_health: int = 8975
    worker_logs: int = 8794
    trigger_logs: int = 8795
    forward_proxy: int = 3138  # the first demo country's proxy; the next countries take the next ports
    metrics: int = 9109  # the distributor's collector (compose: 9108)
    prometheus: int = 9091  # Prometheus with the shipped alert rules (compose: 9090)


@dataclass(frozen=True)
class ClusterSecrets:
    """What .env holds for compose, generated once per cluster directory and kept in secrets.json."""

    postgres_password: str
    redis_password: str
    fernet_key: str
    api_secret_key: str
    jwt_secret: str
    admin_password: str

    @classmethod
    def load_or_create(cls, path: Path) -> ClusterSecrets:
        if path.exists():
            return cls(**json.loads(path.read_text()))
        from cryptography.fernet import Fernet

        created = cls(postgres_password=secrets.token_hex(16), redis_password=secrets.token_hex(16),
                      fernet_key=Fernet.generate_key().decode(), api_secret_key=secrets.token_hex(32),
                      jwt_secret=secrets.token_hex(32), admin_password=secrets.token_urlsafe(12))
        write_private_file(path, json.dumps(vars(created)))
        return created


@dataclass
class WorkerMachine:
    """A machine of Harvester workers: the compose worker services of one machine, with its own node names
    (``<queue>@<machine>``, as compose's ``%h``)."""

    name: str
    kind: str  # "http": worker-priority + worker-default; "pageslots": worker-pageslots
    concurrency: int = 2

    @property
    def service_name(self) -> str:
        return f"worker-{self.name}"

    def node_names(self) -> list[str]:
        return [f"priority@{self.name}", f"default@{self.name}"] if self.kind == "http" else [f"pageslots@{self.name}"]


@dataclass
class Cluster:
    """The topology: its configuration and its services in start order (``airflow_api`` drives its Airflow)."""

    base_dir: Path
    ports: ClusterPorts = field(default_factory=ClusterPorts)
    mongo_uri: str | None = None  # an already running MongoDB (the tests' server); else one is started
    mongo_database: str = "harvester"
    demo_site_url: str | None = None  # an already running demo site; else one is started
    sources_dir: Path | None = None
    machines: list[WorkerMachine] = field(default_factory=lambda: [WorkerMachine("machine-a", "http"),
                                                                  WorkerMachine("machine-c", "pageslots")])
    harvester_overrides: dict[str, str] = field(default_factory=dict)  # HARVESTER_* of every Harvester process
    # Country -> forward proxy URL, given to the slot hosts and the allocator as AIRFLOW_CONN_PROXY_<C>
    # (compose sets the same variables). The caller's own AIRFLOW_CONN_PROXY_<C> count as configured too.
    proxies: dict[str, str] = field(default_factory=dict)
    demo_proxies: bool = False  # start a counting forward proxy for each browser country left without one
    fast_unsafe_postgres: bool = False  # fsync off: for throwaway clusters (tests) only
    dag_refresh_seconds: int = 30
    sentinel_plan: SentinelPlan = field(default_factory=SentinelPlan)
    environ: dict[str, str] = field(default_factory=lambda: dict(os.environ))

    def __post_init__(self) -> None:
        self.base_dir = Path(self.base_dir)
        self.run_dir = self.base_dir / "run"
        self.log_dir = self.base_dir / "log"
        self.airflow_home = self.base_dir / "airflow"
        self.bin = VENV_BIN
        self.secrets = ClusterSecrets.load_or_create(self.base_dir / "secrets.json")
        self._mongo = None if self.mongo_uri else choose_mongo(self.ports.mongo, self.base_dir / "data", self.environ)
        self.postgres = PostgresServer(data_directory(self.base_dir), self.ports.postgres, POSTGRES_USER,
                                       self.secrets.postgres_password, self.fast_unsafe_postgres)
        self.supervisor = Supervisor(self.run_dir, self.log_dir, cwd=REPOSITORY_ROOT, step=TimedSteps())
        self.airflow_api = AirflowApi(self.airflow_url, AIRFLOW_USER, self.secrets.admin_password,
                                      explain=lambda: self.log_tail("airflow-dag-processor"))

    # -- addresses -------------------------------------------------------------------------------
    @property
    def redis_url(self) -> str:
        return f"redis://:{self.secrets.redis_password}@{LOOPBACK}:{self.ports.redis}/0"

    @property
    def sentinel_ports(self) -> list[int]:
        return [getattr(self.ports, f"sentinel_{number}") for number in range(1, SENTINELS + 1)]

    @property
    def sentinels(self) -> str:
        """HARVESTER_REDIS_SENTINELS: every Redis client asks these for the current primary."""
        return format_sentinels(tuple((LOOPBACK, port) for port in self.sentinel_ports))

    def redis_settings(self, database: int = 0) -> HarvesterSettings:
        """What a Harvester process of this cluster is told about Redis (for the broker URLs built from it)."""
        return HarvesterSettings(redis_url=f"{self.redis_url.rsplit('/', 1)[0]}/{database}",
                                 redis_sentinels=self.sentinels,
                                 redis_sentinel_master=self.sentinel_plan.master_name,
                                 redis_sentinel_password=self.secrets.redis_password)

    @property
    def redis_environment(self) -> dict[str, str]:
        """The Redis part of every Harvester process's environment: the primary through the sentinels, and
        the same as the Airflow connection ``redis_default`` (its extras name the sentinels)."""
        settings = self.redis_settings()
        connection = (f"{settings.redis_url}?sentinels={self.sentinels.replace(':', '%3A').replace(',', '%2C')}"
                      f"&sentinel_master={settings.redis_sentinel_master}"
                      f"&sentinel_password={self.secrets.redis_password}")
        return {"HARVESTER_REDIS_URL": settings.redis_url, "HARVESTER_REDIS_SENTINELS": settings.redis_sentinels,
                "HARVESTER_REDIS_SENTINEL_MASTER": settings.redis_sentinel_master,
                "HARVESTER_REDIS_SENTINEL_PASSWORD": settings.redis_sentinel_password,
                "AIRFLOW_CONN_REDIS_DEFAULT": connection}

    @property
    def redis_target(self) -> RedisTarget:
        """Database 0's primary, wherever the sentinels say it is (for the readiness probes)."""
        settings = self.redis_settings()
        return RedisTarget("redis_default", settings.redis_url, "the cluster", sentinels=tuple(
            (LOOPBACK, port) for port in self.sentinel_ports), sentinel_master=settings.redis_sentinel_master,
            sentinel_password=settings.redis_sentinel_password)

    @property
    def broker(self) -> tuple[str, dict[str, object]]:
        """The Harvester workers' Celery broker (kombu's sentinel:// transport) and its transport options."""
        return celery_broker(self.redis_settings())

    @property
    def airflow_broker(self) -> tuple[str, dict[str, object]]:
        """Airflow's Celery through the same sentinels, database 1 (compose does the same)."""
        return celery_broker(self.redis_settings(database=1))

    @property
    def airflow_broker_url(self) -> str:
        return self.airflow_broker[0]

    @property
    def postgres_address(self) -> str:
        return f"{POSTGRES_USER}:{self.secrets.postgres_password}@{LOOPBACK}:{self.ports.postgres}/airflow"

    @property
    def postgres_data(self) -> Path:
        return self.postgres.data

    @property
    def airflow_url(self) -> str:
        return f"http://{LOOPBACK}:{self.ports.airflow}"

    @property
    def resolved_mongo_uri(self) -> str:
        if self.mongo_uri:
            return self.mongo_uri
        assert self._mongo is not None  # chosen in __post_init__ whenever no URI was given
        return self._mongo.uri

    @property
    def resolved_demo_site_url(self) -> str:
        return self.demo_site_url or f"http://{LOOPBACK}:{self.ports.demo_site}"

    @property
    def demo_site_network(self) -> str:
        """The demo site's address as an allow-list entry of the address guard (``CIDR:port``)."""
        parts = urlsplit(self.resolved_demo_site_url)
        return f"{parts.hostname}/32:{parts.port or 80}"

    @property
    def passwords_file(self) -> Path:
        return self.airflow_home / "auth" / "passwords.json"

    @cached_property
    def country_proxies(self) -> CountryProxies:
        """Each browser country's proxy: given (``proxies``), the caller's AIRFLOW_CONN_PROXY_<C>, else one
        the cluster starts when ``demo_proxies`` is on (a country without any gets its tasks dead-lettered)."""
        countries = browser_countries(self.sources_dir or REPOSITORY_ROOT / "include" / "sources")
        return CountryProxies(countries, self.environ, given=self.proxies,
                              first_port=self.ports.forward_proxy if self.demo_proxies else None)

    # -- environments: each kind of process gets what its compose service gets ------------------
    def _base_environment(self) -> dict[str, str]:
        """The caller's environment without any HARVESTER_* or AIRFLOW* of its own."""
        return with_venv_on_path({key: value for key, value in self.environ.items()
                                  if not key.startswith(("HARVESTER_", "AIRFLOW"))})

    def harvester_redis_environment(self) -> dict[str, str]:
        """The distributor's: Redis only."""
        return {**self._base_environment(), **self.redis_environment,
                **{k: v for k, v in self.harvester_overrides.items() if k != "HARVESTER_MONGO_DATABASE"}}

    def harvester_environment(self) -> dict[str, str]:
        """A Harvester worker's: Redis, MongoDB, the demo site and the sources; no Airflow secret."""
        env = {
            **self._base_environment(),
            **self.redis_environment,
            "HARVESTER_MONGO_URI": self.resolved_mongo_uri,
            "HARVESTER_MONGO_DATABASE": self.mongo_database,
            "HARVESTER_DEMO_SITE_URL": self.resolved_demo_site_url,
            # The fetcher refuses private and loopback addresses: only the local demo site is let through.
            "HARVESTER_ALLOWED_PRIVATE_NETWORKS": self.demo_site_network,
            "AIRFLOW_CONN_MONGO_DEFAULT": airflow_connection_uri(self.resolved_mongo_uri),
            **self.country_proxies.environment(),
            **self.harvester_overrides,
        }
        if self.sources_dir is not None:
            env["HARVESTER_SOURCES_DIR"] = str(self.sources_dir)
        return env

    def airflow_environment(self) -> dict[str, str]:
        """Airflow's services: the Harvester variables plus Airflow's configuration and secrets."""
        return {
            **self.harvester_environment(),
            **catalogue.airflow_environment(REPOSITORY_ROOT, self.airflow_home, self.ports.airflow,
                                            self.dag_refresh_seconds, self.dag_refresh_seconds),
            "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
            "AIRFLOW__CORE__AUTH_MANAGER":
                "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{AIRFLOW_USER}:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(self.passwords_file),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"postgresql+psycopg2://{self.postgres_address}",
            "AIRFLOW__CELERY__BROKER_URL": self.airflow_broker_url,
            # the celery provider reads these as broker_transport_options (sentinel_kwargs as JSON)
            "AIRFLOW__CELERY_BROKER_TRANSPORT_OPTIONS__MASTER_NAME": self.sentinel_plan.master_name,
            "AIRFLOW__CELERY_BROKER_TRANSPORT_OPTIONS__SENTINEL_KWARGS":
                json.dumps({"password": self.secrets.redis_password}),
            "AIRFLOW__CELERY__RESULT_BACKEND": f"db+postgresql+psycopg2://{self.postgres_address}",
            "AIRFLOW__CELERY__WORKER_CONCURRENCY": "4",
            "AIRFLOW__CORE__FERNET_KEY": self.secrets.fernet_key,
            "AIRFLOW__API__SECRET_KEY": self.secrets.api_secret_key,
            "AIRFLOW__API_AUTH__JWT_SECRET": self.secrets.jwt_secret,
            "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "True",
            "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_SERVER_HOST": LOOPBACK,
            "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_SERVER_PORT": str(self.ports.scheduler_health),
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(self.ports.worker_logs),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(self.ports.trigger_logs),
            "AIRFLOW__API__WORKERS": "1",
        }

    # -- the services, in start order ------------------------------------------------------------
    def infrastructure(self) -> list[Service]:
        base, port = self._base_environment(), ClusterPorts.variable
        services = [
            self.postgres.service(base, port("postgres")),
            *self.redis_services(base),
        ]
        if self._mongo is not None:
            services += catalogue.mongo_server(self._mongo, self.base_dir / "data", self.ports.mongo, base,
                                               port("mongo"), ready_timeout=90)
        if self.demo_site_url is None:
            services.append(catalogue.demo_site(self.ports.demo_site, base, port("demo_site")))
        return services + self.country_proxies.services(base, port("forward_proxy"))

    def redis_services(self, base: dict[str, str]) -> list[Service]:
        """One primary, one replica and three sentinels (compose runs the same): every client asks the
        sentinels where the primary is, so losing it costs a failover (docs/production.md), not the cluster."""
        port, password, data = ClusterPorts.variable, self.secrets.redis_password, self.base_dir / "data"
        replica_url = f"redis://:{password}@{LOOPBACK}:{self.ports.redis_replica}/0"
        return [
            catalogue.redis_server(self.ports.redis, data / "redis", base, self.redis_url, port("redis"),
                                   password=password),
            catalogue.redis_replica("redis-replica", self.ports.redis_replica, self.ports.redis, data / "redis-replica",
                                    base, replica_url, port("redis_replica"), password=password),
            *(catalogue.redis_sentinel(f"redis-sentinel-{index + 1}", sentinel_port, self.ports.redis,
                                       data / f"redis-sentinel-{index + 1}", base, port(f"sentinel_{index + 1}"),
                                       self.sentinel_plan, password=password)
              for index, sentinel_port in enumerate(self.sentinel_ports)),
        ]

    def airflow_services(self) -> list[Service]:
        """The compose commands; ready when the API's health shows each component's heartbeat."""
        env = self.airflow_environment()
        airflow = str(self.bin / "airflow")
        return [
            Service("airflow-apiserver", [[airflow, "api-server"]], env, port=self.ports.airflow,
                    port_variable=ClusterPorts.variable("airflow"), ready_timeout=240,
                    ready=lambda: readiness.http_ok(f"{self.airflow_url}/api/v2/monitor/health")),
            Service("airflow-scheduler", [[airflow, "scheduler"]], env, ready_timeout=240,
                    ready=lambda: readiness.http_ok(f"http://{LOOPBACK}:{self.ports.scheduler_health}/health")),
            Service("airflow-dag-processor", [[airflow, "dag-processor"]], env, ready_timeout=240,
                    ready=lambda: readiness.airflow_component_healthy(self.airflow_url, "dag_processor")),
            Service("airflow-triggerer", [[airflow, "triggerer", "--skip-serve-logs"]], env, ready_timeout=240,
                    ready=lambda: readiness.airflow_component_healthy(self.airflow_url, "triggerer")),
            Service("airflow-worker", [[airflow, "celery", "worker", "--skip-serve-logs",
                                        "--celery-hostname", "celery@airflow-worker"]], env, ready_timeout=240,
                    ready=lambda: readiness.celery_nodes_answer(*self.airflow_broker, ["celery@airflow-worker"])),
        ]

    def distributor_service(self) -> Service:
        env = {**self.harvester_redis_environment(), "HARVESTER_METRICS_PORT": str(self.ports.metrics)}
        return Service("distributor", [[str(self.bin / "harvester"), "distributor", "--name", "distributor"]],
                       env, ready_timeout=60, port=self.ports.metrics, port_variable=ClusterPorts.variable("metrics"),
                       ready=lambda: readiness.distributor_heartbeat_fresh(self.redis_target, "distributor"))

    def machine_service(self, machine: WorkerMachine) -> Service:
        """The compose worker commands of one machine, with %h spelled out (every machine is this one)."""
        if machine.kind == "http":
            commands = [celery_worker_command(queue, f"{queue}@{machine.name}", machine.concurrency)
                        for queue in ("priority", "default")]
        else:  # a slot host, as compose's worker-pageslots: one page slot per prefork child
            commands = [celery_worker_command(PAGESLOTS_QUEUE, f"pageslots@{machine.name}", machine.concurrency,
                                              pool="prefork")]
        return Service(machine.service_name, commands, self.harvester_environment(), ready_timeout=120,
                       ready=lambda: readiness.celery_nodes_answer(*self.broker, machine.node_names()))

    def prometheus_service(self) -> Service:
        from harvester.services.prometheus import prometheus_service

        return prometheus_service(self.base_dir, self.ports.prometheus, ClusterPorts.variable("prometheus"),
                                  self._base_environment())

    def all_services(self) -> list[Service]:
        return [*self.infrastructure(), *self.airflow_services(), self.distributor_service(),
                self.prometheus_service(), *(self.machine_service(machine) for machine in self.machines)]

    # -- life cycle ------------------------------------------------------------------------------
    def start(self) -> None:
        """Start everything that is not running yet, in order, each waited for until it answers."""
        self.start_metadata_database()
        self.supervisor.start_all(self.airflow_services())  # together: each spends its first seconds importing
        self.supervisor.start_all([self.distributor_service()])
        from harvester.services.prometheus import write_prometheus_config

        write_prometheus_config(self.base_dir, self.ports.metrics)  # the shipped alert rules, the distributor's metrics
        self.supervisor.start_all([self.prometheus_service()])
        self.supervisor.start_all([self.machine_service(machine) for machine in self.machines])

    def start_metadata_database(self) -> None:
        """PostgreSQL, Redis and MongoDB, then Airflow's metadata database migrated (compose's airflow-init)."""
        for directory in (self.run_dir, self.log_dir, self.airflow_home):
            directory.mkdir(parents=True, exist_ok=True)
        self.postgres.initialise(self._base_environment(), self.supervisor.step)
        for service in self.infrastructure():
            self.supervisor.start_all([service])
        self.postgres.create_database("airflow")
        self._airflow_init()

    def run(self, trigger: bool = True) -> None:
        """`make run MODE=cluster`: start, trigger the demo DAG, say where everything is."""
        self.start()
        if trigger:
            run_id = self.airflow_api.trigger(DEMO_SOURCE_DAG)
            self.supervisor.step(f"airflow: triggered {DEMO_SOURCE_DAG} ({run_id})")
        print(self.describe(), flush=True)

    def start_machine(self, machine: WorkerMachine) -> None:
        self.supervisor.start_all([self.machine_service(machine)])
        if machine not in self.machines:
            self.machines.append(machine)

    def kill_machine(self, machine: WorkerMachine) -> None:
        """SIGKILL the machine's whole process group, as a machine that loses power."""
        self.supervisor.kill(machine.service_name)

    def stop(self) -> None:
        """Stop in reverse start order: SIGTERM (warm shutdown; PostgreSQL's fast SIGINT), SIGKILL after 30 s."""
        self.supervisor.stop(self.all_services())

    def status(self) -> bool:
        return self.supervisor.status(self.all_services())

    def destroy(self) -> None:
        """Stop, then remove the PostgreSQL data kept outside ``base_dir`` (throwaway clusters)."""
        self.stop()
        shutil.rmtree(self.postgres_data, ignore_errors=True)

    def log_tail(self, name: str, lines: int = 30) -> str:
        return self.supervisor.log_tail(name, lines)

    def _airflow_init(self) -> None:
        """What the compose airflow-init service does: migrate, then write the UI's passwords file."""
        self.supervisor.step("airflow-init: airflow db migrate")
        with self.supervisor.log_path("airflow-init").open("ab") as log:
            result = subprocess.run([str(self.bin / "airflow"), "db", "migrate"], env=self.airflow_environment(),
                                    stdout=log, stderr=subprocess.STDOUT, cwd=REPOSITORY_ROOT, timeout=600)
        if result.returncode != 0:
            raise ClusterError(f"airflow db migrate failed\n{self.log_tail('airflow-init')}")
        write_private_file(self.passwords_file, json.dumps({AIRFLOW_USER: self.secrets.admin_password}) + "\n")

    def describe(self) -> str:
        mongo = redact(self.resolved_mongo_uri)
        proxies = ", ".join(f"{name.removeprefix('AIRFLOW_CONN_PROXY_')} {redact(url)}"
                            for name, url in self.country_proxies.environment().items())
        proxies = proxies or "none (browser tasks of a country without one are dead-lettered)"
        return (
            "\nHarvester cluster is running (the docker-compose topology, on loopback).\n"
            f"  Airflow UI:   {self.airflow_url}  user {AIRFLOW_USER}, password in {self.base_dir / 'secrets.json'}"
            " (admin_password)\n"
            f"  PostgreSQL:   {LOOPBACK}:{self.ports.postgres} (data {self.postgres_data})\n"
            f"  Redis:        primary {LOOPBACK}:{self.ports.redis}, replica {LOOPBACK}:{self.ports.redis_replica}, "
            f"sentinels {self.sentinels} (master {self.sentinel_plan.master_name!r}; password in secrets.json)\n"
            f"  MongoDB:      {mongo}\n"
            f"  Demo site:    {self.resolved_demo_site_url}\n"
            f"  Workers:      {', '.join(node for machine in self.machines for node in machine.node_names())}\n"
            f"  Prometheus:   http://{LOOPBACK}:{self.ports.prometheus}  (deploy/prometheus/alerts.yml loaded)\n"
            f"  Proxies:      {proxies}\n"
            f"  Logs:         {self.log_dir}/\n"
            "  Stop:         make stop MODE=cluster\n"
        )


# -- make run MODE=cluster / make stop MODE=cluster ----------------------------------------------
def local_cluster(environ: dict[str, str] | None = None) -> Cluster:
    environ = dict(os.environ if environ is None else environ)
    return Cluster(base_dir=REPOSITORY_ROOT / "var" / "cluster", ports=ClusterPorts.from_environment(environ),
                   mongo_uri=environ.get("HARVESTER_MONGO_URI"), demo_proxies=True, environ=environ)


def main(argv: list[str] | None = None) -> int:
    return launcher_main(local_cluster, "python -m harvester.services.cluster", __doc__, argv)


if __name__ == "__main__":
    raise SystemExit(main())
