"""The production topology of docker-compose.yaml on one machine, on loopback, without Docker.

PostgreSQL (the Debian package, a private cluster), Redis with a password, MongoDB, the demo site,
Airflow with the CeleryExecutor as separate processes (``airflow db migrate``, api-server, scheduler,
dag-processor, triggerer, ``airflow celery worker``), the distributor, and Harvester worker *hosts*:
process groups with node names of their own, running the commands compose runs. The topology test
(tests/services/test_cluster_topology.py) and ``make run MODE=cluster`` both use this module, so what
users try is what CI proves.

Every service has a PID file under ``<base>/run`` (for a host: its process group) and a log under
``<base>/log``, so a second start starts nothing twice and ``stop`` stops exactly what was started.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from hashlib import sha256
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from harvester.errors import ClusterError
from harvester.queues import PAGESLOTS_QUEUE
from harvester.services import readiness
from harvester.services.mongo import airflow_connection_uri, choose_mongo, redact
from harvester.services.pidfiles import PidFile
from harvester.services.ports import LOOPBACK, free_port, is_port_free
from harvester.settings import REPOSITORY_ROOT

AIRFLOW_USER = "admin"
POSTGRES_USER = "airflow"
CELERY_APP = "harvester.workers.celery_app"
AIRFLOW_CELERY_APP = "airflow.providers.celery.executors.celery_executor.app"
PORT_NAMES = ("postgres", "redis", "mongo", "airflow", "demo_site", "scheduler_health", "worker_logs",
              "trigger_logs", "forward_proxy")


@dataclass(frozen=True)
class ClusterPorts:
    postgres: int = 5433
    redis: int = 6380
    mongo: int = 27018
    airflow: int = 8081
    demo_site: int = 8009
    scheduler_health: int = 8975
    worker_logs: int = 8794
    trigger_logs: int = 8795
    forward_proxy: int = 3138  # the first demo country's proxy (demo_proxies); the next countries the next ports

    @classmethod
    def from_environment(cls, environ: dict[str, str]) -> ClusterPorts:
        """Defaults beside `make run`'s (so both can run at once); each moves with HARVESTER_CLUSTER_<NAME>_PORT."""
        defaults = cls()
        return cls(**{name: int(environ.get(f"HARVESTER_CLUSTER_{name.upper()}_PORT", getattr(defaults, name)))
                      for name in PORT_NAMES})

    @classmethod
    def free(cls) -> ClusterPorts:
        """Ports the kernel says are free now (tests)."""
        return cls(**{name: free_port() for name in PORT_NAMES})


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
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(vars(created)))
        path.chmod(0o600)
        return created


@dataclass
class Service:
    """One process group: ``commands`` share it (a worker host runs one Celery worker per queue)."""

    name: str
    commands: list[list[str]]
    env: dict[str, str]
    ready: Callable[[], bool] | None = None
    ready_timeout: float = 120.0
    port: int | None = None
    user: str | None = None  # run as this system user (PostgreSQL refuses to run as root)
    cwd: Path | None = None


@dataclass
class WorkerHost:
    """A Harvester worker "host": the compose worker services of one machine, with its own node names."""

    name: str
    kind: str  # "http": worker-priority + worker-default; "pageslots": worker-pageslots
    concurrency: int = 2

    def node_names(self) -> list[str]:
        return [f"priority@{self.name}", f"default@{self.name}"] if self.kind == "http" else [f"pageslots@{self.name}"]


@dataclass
class Cluster:
    """The topology, its configuration and its processes. ``start()`` then ``stop()``."""

    base_dir: Path
    ports: ClusterPorts = field(default_factory=ClusterPorts)
    mongo_uri: str | None = None  # an already running MongoDB (the tests' server); else one is started
    mongo_database: str = "harvester"
    demo_site_url: str | None = None  # an already running demo site; else one is started
    sources_dir: Path | None = None
    hosts: list[WorkerHost] = field(default_factory=lambda: [WorkerHost("host-a", "http"),
                                                            WorkerHost("host-c", "pageslots")])
    harvester_overrides: dict[str, str] = field(default_factory=dict)  # HARVESTER_* of every Harvester process
    # Country -> forward proxy URL, given to the slot hosts and the allocator as AIRFLOW_CONN_PROXY_<C>
    # (compose sets the same variables). The caller's own AIRFLOW_CONN_PROXY_<C> count as configured too.
    proxies: dict[str, str] = field(default_factory=dict)
    demo_proxies: bool = False  # start a counting forward proxy for each browser country left without one
    fast_unsafe_postgres: bool = False  # fsync off: for throwaway clusters (tests) only
    dag_refresh_seconds: int = 30
    environ: dict[str, str] = field(default_factory=lambda: dict(os.environ))

    def __post_init__(self) -> None:
        self.base_dir = Path(self.base_dir)
        self.run_dir = self.base_dir / "run"
        self.log_dir = self.base_dir / "log"
        self.airflow_home = self.base_dir / "airflow"
        self.bin = Path(sys.executable).parent
        self.secrets = ClusterSecrets.load_or_create(self.base_dir / "secrets.json")
        self._mongo = None if self.mongo_uri else choose_mongo(self.ports.mongo, self.base_dir / "data", self.environ)
        self._processes: dict[str, list[subprocess.Popen[bytes]]] = {}

    # -- addresses -------------------------------------------------------------------------------
    @property
    def redis_url(self) -> str:
        return f"redis://:{self.secrets.redis_password}@{LOOPBACK}:{self.ports.redis}/0"

    @property
    def airflow_broker_url(self) -> str:
        """Airflow's Celery on the same Redis, database 1 (compose does the same)."""
        return f"redis://:{self.secrets.redis_password}@{LOOPBACK}:{self.ports.redis}/1"

    @property
    def postgres_address(self) -> str:
        return f"{POSTGRES_USER}:{self.secrets.postgres_password}@{LOOPBACK}:{self.ports.postgres}/airflow"

    @property
    def airflow_url(self) -> str:
        return f"http://{LOOPBACK}:{self.ports.airflow}"

    @property
    def resolved_mongo_uri(self) -> str:
        return self.mongo_uri or self._mongo.uri  # type: ignore[union-attr]

    @property
    def resolved_demo_site_url(self) -> str:
        return self.demo_site_url or f"http://{LOOPBACK}:{self.ports.demo_site}"

    @property
    def demo_site_network(self) -> str:
        """The demo site's address as an allow-list entry of the address guard (``CIDR:port``)."""
        parts = urlsplit(self.resolved_demo_site_url)
        return f"{parts.hostname}/32:{parts.port or 80}"

    @property
    def postgres_data(self) -> Path:
        """The cluster's data directory. As root it lives where the postgres user can reach it."""
        if os.geteuid() != 0:
            return self.base_dir / "postgres"
        digest = sha256(str(self.base_dir.resolve()).encode()).hexdigest()[:12]
        return Path(tempfile.gettempdir()) / f"harvester-postgres-{digest}"

    # -- environments: each kind of process gets what its compose service gets ------------------
    def _base_environment(self) -> dict[str, str]:
        """The caller's environment without any HARVESTER_* or AIRFLOW* of its own."""
        env = {key: value for key, value in self.environ.items() if not key.startswith(("HARVESTER_", "AIRFLOW"))}
        env["PATH"] = f"{self.bin}{os.pathsep}{env.get('PATH', '')}"
        return env

    def harvester_redis_environment(self) -> dict[str, str]:
        """The distributor's: Redis only."""
        return {**self._base_environment(), "HARVESTER_REDIS_URL": self.redis_url,
                "AIRFLOW_CONN_REDIS_DEFAULT": self.redis_url,
                **{k: v for k, v in self.harvester_overrides.items() if k != "HARVESTER_MONGO_DATABASE"}}

    def harvester_environment(self) -> dict[str, str]:
        """A Harvester worker's: Redis, MongoDB, the demo site and the sources; no Airflow secret."""
        env = {
            **self._base_environment(),
            "HARVESTER_REDIS_URL": self.redis_url,
            "HARVESTER_MONGO_URI": self.resolved_mongo_uri,
            "HARVESTER_MONGO_DATABASE": self.mongo_database,
            "HARVESTER_DEMO_SITE_URL": self.resolved_demo_site_url,
            # The fetcher refuses private and loopback addresses: only the local demo site is let through.
            "HARVESTER_ALLOWED_PRIVATE_NETWORKS": self.demo_site_network,
            "AIRFLOW_CONN_MONGO_DEFAULT": airflow_connection_uri(self.resolved_mongo_uri),
            "AIRFLOW_CONN_REDIS_DEFAULT": self.redis_url,
            **self.proxy_environment(),
            **self.harvester_overrides,
        }
        if self.sources_dir is not None:
            env["HARVESTER_SOURCES_DIR"] = str(self.sources_dir)
        return env

    def airflow_environment(self) -> dict[str, str]:
        """Airflow's services: the Harvester variables plus Airflow's configuration and secrets."""
        return {
            **self.harvester_environment(),
            "AIRFLOW_HOME": str(self.airflow_home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(REPOSITORY_ROOT / "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPOSITORY_ROOT / "plugins"),
            "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
            "AIRFLOW__CORE__AUTH_MANAGER":
                "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{AIRFLOW_USER}:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(self.passwords_file),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"postgresql+psycopg2://{self.postgres_address}",
            "AIRFLOW__CELERY__BROKER_URL": self.airflow_broker_url,
            "AIRFLOW__CELERY__RESULT_BACKEND": f"db+postgresql+psycopg2://{self.postgres_address}",
            "AIRFLOW__CELERY__WORKER_CONCURRENCY": "4",
            "AIRFLOW__CORE__FERNET_KEY": self.secrets.fernet_key,
            "AIRFLOW__API__SECRET_KEY": self.secrets.api_secret_key,
            "AIRFLOW__API_AUTH__JWT_SECRET": self.secrets.jwt_secret,
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.airflow_url}/execution/",
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "True",
            "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_SERVER_HOST": LOOPBACK,
            "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_SERVER_PORT": str(self.ports.scheduler_health),
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(self.ports.worker_logs),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(self.ports.trigger_logs),
            "AIRFLOW__API__HOST": LOOPBACK,
            "AIRFLOW__API__PORT": str(self.ports.airflow),
            "AIRFLOW__API__BASE_URL": self.airflow_url,
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": str(self.dag_refresh_seconds),
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": str(self.dag_refresh_seconds),
        }

    def browser_countries(self) -> list[str]:
        """Countries of the browser sources: each needs a proxy before a page slot may open a page for it."""
        from harvester.config.loader import load_sources

        directory = self.sources_dir or REPOSITORY_ROOT / "include" / "sources"
        return sorted({source.country for source in load_sources(directory).sources.values()
                       if source.render == "browser" and source.country})

    def demo_proxy_ports(self) -> dict[str, int]:
        """Country -> port of the forward proxy the cluster starts for it (``demo_proxies``; a proxy given in
        ``proxies`` or the caller's AIRFLOW_CONN_PROXY_<C> wins: then none is started for that country)."""
        from harvester.pageslots.proxies import proxy_environment_variable

        if not self.demo_proxies:
            return {}
        countries = [country for country in self.browser_countries()
                     if country not in self.proxies and proxy_environment_variable(country) not in self.environ]
        return {country: self.ports.forward_proxy + index for index, country in enumerate(countries)}

    def proxy_environment(self) -> dict[str, str]:
        """AIRFLOW_CONN_PROXY_<C> for every browser country that has a proxy (configured, given or started)."""
        from harvester.pageslots.proxies import proxy_environment_variable

        configured = {country: self.environ[proxy_environment_variable(country)] for country in self.browser_countries()
                      if proxy_environment_variable(country) in self.environ}
        started = {country: f"http://{LOOPBACK}:{port}" for country, port in self.demo_proxy_ports().items()}
        return {proxy_environment_variable(country): url
                for country, url in {**configured, **started, **self.proxies}.items()}

    @property
    def passwords_file(self) -> Path:
        return self.airflow_home / "auth" / "passwords.json"

    # -- the services, in start order ------------------------------------------------------------
    def infrastructure(self) -> list[Service]:
        base = self._base_environment()
        services = [
            Service("postgres", [self._postgres_command()], base, port=self.ports.postgres,
                    ready=self._postgres_ready, ready_timeout=60,
                    user="postgres" if os.geteuid() == 0 else None, cwd=Path(tempfile.gettempdir())),
            Service("redis", [[
                "redis-server", "--bind", LOOPBACK, "--port", str(self.ports.redis),
                "--dir", str(self.base_dir / "data" / "redis"), "--appendonly", "yes", "--appendfsync", "everysec",
                "--save", "", "--requirepass", self.secrets.redis_password]], base, port=self.ports.redis,
                ready=lambda: readiness.redis_ping(self.redis_url), ready_timeout=20),
        ]
        if self._mongo is not None and self._mongo.command is not None:
            services.append(Service("mongo", [self._mongo.command], base, port=self.ports.mongo,
                                    ready=lambda: readiness.mongo_ping(self.resolved_mongo_uri), ready_timeout=90))
        if self.demo_site_url is None:
            services.append(Service(
                "demo-site", [[str(self.bin / "harvester"), "demo-site", "--host", LOOPBACK,
                               "--port", str(self.ports.demo_site)]], base, port=self.ports.demo_site,
                ready=lambda: readiness.http_ok(self.resolved_demo_site_url + "/"), ready_timeout=30))
        for country, port in self.demo_proxy_ports().items():
            services.append(Service(
                f"proxy-{country}", [[str(self.bin / "harvester"), "forward-proxy", "--host", LOOPBACK,
                                      "--port", str(port), "--label", country]], base, port=port,
                ready=lambda port=port: readiness.tcp_open(LOOPBACK, port), ready_timeout=20))
        return services

    def airflow_services(self) -> list[Service]:
        """The compose commands; ready when the API's health shows each component's heartbeat."""
        env = self.airflow_environment()
        airflow = str(self.bin / "airflow")
        return [
            Service("airflow-apiserver", [[airflow, "api-server"]], env, port=self.ports.airflow,
                    ready=lambda: readiness.http_ok(f"{self.airflow_url}/api/v2/monitor/health"), ready_timeout=240),
            Service("airflow-scheduler", [[airflow, "scheduler"]], env,
                    ready=lambda: readiness.http_ok(f"http://{LOOPBACK}:{self.ports.scheduler_health}/health"),
                    ready_timeout=240),
            Service("airflow-dag-processor", [[airflow, "dag-processor"]], env,
                    ready=lambda: self._component_healthy("dag_processor"), ready_timeout=240),
            Service("airflow-triggerer", [[airflow, "triggerer", "--skip-serve-logs"]], env,
                    ready=lambda: self._component_healthy("triggerer"), ready_timeout=240),
            Service("airflow-worker", [[airflow, "celery", "worker", "--skip-serve-logs",
                                        "--celery-hostname", "celery@airflow-worker"]], env,
                    ready=lambda: self.celery_nodes_answer(self.airflow_broker_url, ["celery@airflow-worker"]),
                    ready_timeout=240),
        ]

    def distributor_service(self) -> Service:
        return Service("distributor", [[str(self.bin / "harvester"), "distributor", "--name", "distributor"]],
                       self.harvester_redis_environment(), ready=self.distributor_alive, ready_timeout=60)

    def worker_host_service(self, host: WorkerHost) -> Service:
        """The compose worker commands of one host, with %h spelled out (every host is this machine)."""
        celery = [str(self.bin / "celery"), "-A", CELERY_APP, "worker", "--loglevel", "INFO"]
        if host.kind == "http":
            commands = [[*celery, "-Q", queue, "-n", f"{queue}@{host.name}", "--concurrency", str(host.concurrency)]
                        for queue in ("priority", "default")]
        else:
            # a slot host, as compose's worker-pageslots: one page slot per prefork child
            commands = [[*celery, "-Q", PAGESLOTS_QUEUE, "-n", f"pageslots@{host.name}",
                         "--pool", "prefork", "--concurrency", str(host.concurrency)]]
        return Service(f"worker-{host.name}", commands,
                       self.harvester_environment(),
                       ready=lambda: self.celery_nodes_answer(self.redis_url, host.node_names()), ready_timeout=120)

    def all_services(self) -> list[Service]:
        return [*self.infrastructure(), *self.airflow_services(), self.distributor_service(),
                *(self.worker_host_service(host) for host in self.hosts)]

    # -- readiness probes (what the compose healthchecks ask) -----------------------------------
    def _postgres_ready(self) -> bool:
        import psycopg2

        connection = psycopg2.connect(host=LOOPBACK, port=self.ports.postgres, user=POSTGRES_USER,
                                      password=self.secrets.postgres_password, dbname="postgres", connect_timeout=2)
        connection.close()
        return True

    def _component_healthy(self, component: str) -> bool:
        import httpx

        health = httpx.get(f"{self.airflow_url}/api/v2/monitor/health", timeout=5).json()
        return health.get(component, {}).get("status") == "healthy"

    @staticmethod
    def celery_nodes_answer(broker_url: str, nodes: list[str]) -> bool:
        """`celery inspect ping -d <node>` for every node, in-process (one broker round trip)."""
        from celery import Celery

        probe = Celery("probe", broker=broker_url)
        try:
            replies = probe.control.ping(destination=nodes, timeout=1.0)
        finally:
            probe.close()
        answered = {name for reply in replies for name in reply}
        return set(nodes) <= answered

    def distributor_alive(self, max_age: float = 90.0) -> bool:
        """What `harvester health distributor --name distributor` checks."""
        import redis

        from harvester.redis_keys import distributor_heartbeat

        client = redis.Redis.from_url(self.redis_url, socket_timeout=2)
        try:
            raw = client.get(distributor_heartbeat("distributor"))
        finally:
            client.close()
        return raw is not None and time.time() - float(raw) <= max_age

    # -- life cycle ------------------------------------------------------------------------------
    def start(self) -> None:
        """Start everything that is not running yet, in order, each waited for until it answers."""
        for directory in (self.run_dir, self.log_dir, self.airflow_home, self.base_dir / "data" / "redis",
                          self.base_dir / "data" / "mongod"):
            directory.mkdir(parents=True, exist_ok=True)
        self._initialise_postgres()
        for service in self.infrastructure():
            self.start_service(service)
        self._create_airflow_database()
        self._airflow_init()
        airflow = self.airflow_services()
        for service in airflow:  # started together: each spends its first seconds importing Airflow
            self.start_service(service, wait=False)
        self.wait_all_ready(airflow)
        self.start_service(self.distributor_service())
        hosts = [self.worker_host_service(host) for host in self.hosts]
        for service in hosts:
            self.start_service(service, wait=False)
        self.wait_all_ready(hosts)

    def start_host(self, host: WorkerHost) -> None:
        self.start_service(self.worker_host_service(host))
        if host not in self.hosts:
            self.hosts.append(host)

    def kill_host(self, host: WorkerHost) -> None:
        """SIGKILL the host's whole process group, as a machine that loses power."""
        service = self.worker_host_service(host)
        pgid = PidFile(self.run_dir / f"{service.name}.pid").read()
        if pgid is not None:
            signal_group(pgid, signal.SIGKILL)
            wait_group_gone(pgid, 20)
            PidFile(self.run_dir / f"{service.name}.pid").remove()
        self._reap(service.name)

    def stop(self) -> None:
        """Stop in reverse start order: SIGTERM (warm shutdown), SIGKILL after 30 s."""
        names = [service.name for service in self.all_services()]
        names += [path.stem for path in sorted(self.run_dir.glob("*.pid")) if path.stem not in names]
        for name in reversed(names):
            pid_file = PidFile(self.run_dir / f"{name}.pid")
            pgid = pid_file.read()
            if pgid is not None and group_alive(pgid):
                step(f"{name}: stopping (process group {pgid})")
                # PostgreSQL's fast shutdown is SIGINT; SIGTERM would wait for every client to leave
                signal_group(pgid, signal.SIGINT if name == "postgres" else signal.SIGTERM)
                if not wait_group_gone(pgid, 30, reap=lambda name=name: self._reap(name)):
                    signal_group(pgid, signal.SIGKILL)
                    wait_group_gone(pgid, 10, reap=lambda name=name: self._reap(name))
            pid_file.remove()
            self._reap(name)

    def destroy(self) -> None:
        """Stop, then remove the PostgreSQL data kept outside ``base_dir`` (throwaway clusters)."""
        self.stop()
        shutil.rmtree(self.postgres_data, ignore_errors=True)

    def start_service(self, service: Service, wait: bool = True) -> None:
        pid_file = PidFile(self.run_dir / f"{service.name}.pid")
        pgid = pid_file.read()
        if pgid is not None and group_alive(pgid):
            step(f"{service.name}: already running (process group {pgid})")
            return
        if service.port is not None and not is_port_free(service.port):
            raise ClusterError(f"{service.name}: port {LOOPBACK}:{service.port} is taken; stop that program or set "
                               f"HARVESTER_CLUSTER_{service.name.upper().replace('-', '_')}_PORT")
        step(f"{service.name}: starting" + (f" on {LOOPBACK}:{service.port}" if service.port else ""))
        log_path = self.log_dir / f"{service.name}.log"
        processes: list[subprocess.Popen[bytes]] = []
        with log_path.open("ab") as log:
            for command in service.commands:
                processes.append(subprocess.Popen(
                    command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=service.env,
                    cwd=service.cwd or REPOSITORY_ROOT, user=service.user,
                    # the first process leads a new process group; the others of a host join it
                    process_group=0 if not processes else processes[0].pid,
                ))
        pid_file.write(processes[0].pid)
        self._processes[service.name] = processes
        if wait:
            self.wait_ready(service)

    def wait_ready(self, service: Service) -> None:
        self.wait_all_ready([service])

    def wait_all_ready(self, services: list[Service]) -> None:
        """Wait for services started together; the first one that dies fails the start at once."""
        waiting = [service for service in services if service.ready is not None]
        deadline = time.monotonic() + max((service.ready_timeout for service in waiting), default=0)
        while waiting:
            for service in list(waiting):
                codes = [process.poll() for process in self._processes.get(service.name, [])]
                if any(code is not None for code in codes):
                    raise ClusterError(f"{service.name} exited with code {codes}\n{self.log_tail(service.name)}")
                try:
                    ready = bool(service.ready())  # type: ignore[misc]
                except Exception:  # still starting: any failure means "not yet"
                    ready = False
                if ready:
                    step(f"{service.name}: ready")
                    waiting.remove(service)
            if waiting and time.monotonic() > deadline:
                names = ", ".join(service.name for service in waiting)
                raise ClusterError(f"not ready in time: {names}\n{self.log_tail(waiting[0].name)}")
            time.sleep(0.5)

    def log_tail(self, name: str, lines: int = 30) -> str:
        path = self.log_dir / f"{name}.log"
        if not path.exists():
            return f"(no log at {path})"
        return f"last lines of {path}:\n" + "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def _reap(self, name: str) -> None:
        for process in self._processes.pop(name, []):
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._processes.setdefault(name, []).append(process)

    # -- one-shot steps ----------------------------------------------------------------------------
    def _postgres_command(self) -> list[str]:
        command = [str(postgres_bin() / "postgres"), "-D", str(self.postgres_data / "data"),
                   "-p", str(self.ports.postgres), "-c", f"listen_addresses={LOOPBACK}",
                   "-c", "unix_socket_directories=", "-c", "max_connections=200"]
        if self.fast_unsafe_postgres:
            command += ["-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"]
        return command

    def _initialise_postgres(self) -> None:
        """`initdb` once: a password-protected superuser for Airflow, as the compose postgres service has."""
        data = self.postgres_data / "data"
        if (data / "PG_VERSION").exists():
            return
        step(f"postgres: initdb in {data}")
        self.postgres_data.mkdir(parents=True, exist_ok=True)
        password_file = self.postgres_data / "password"
        password_file.write_text(self.secrets.postgres_password + "\n")
        as_postgres = os.geteuid() == 0
        if as_postgres:
            import pwd

            account = pwd.getpwnam("postgres")
            for path in (self.postgres_data, password_file):
                os.chown(path, account.pw_uid, account.pw_gid)
        self.postgres_data.chmod(0o700)
        result = subprocess.run(
            [str(postgres_bin() / "initdb"), "-D", str(data), "-U", POSTGRES_USER, f"--pwfile={password_file}",
             "--auth=scram-sha-256", "-E", "UTF8", "--no-instructions"],
            capture_output=True, text=True, user="postgres" if as_postgres else None, cwd=tempfile.gettempdir(),
            env=self._base_environment(), timeout=180,
        )
        password_file.unlink()
        if result.returncode != 0:
            raise ClusterError(f"initdb failed:\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}")

    def _create_airflow_database(self) -> None:
        import psycopg2

        connection = psycopg2.connect(host=LOOPBACK, port=self.ports.postgres, user=POSTGRES_USER,
                                      password=self.secrets.postgres_password, dbname="postgres")
        connection.autocommit = True
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1 FROM pg_database WHERE datname = 'airflow'")
                if cursor.fetchone() is None:
                    cursor.execute("CREATE DATABASE airflow")
        finally:
            connection.close()

    def _airflow_init(self) -> None:
        """What the compose airflow-init service does: migrate, then write the UI's passwords file."""
        step("airflow-init: airflow db migrate")
        log_path = self.log_dir / "airflow-init.log"
        with log_path.open("ab") as log:
            result = subprocess.run([str(self.bin / "airflow"), "db", "migrate"], env=self.airflow_environment(),
                                    stdout=log, stderr=subprocess.STDOUT, cwd=REPOSITORY_ROOT, timeout=600)
        if result.returncode != 0:
            raise ClusterError(f"airflow db migrate failed\n{self.log_tail('airflow-init')}")
        self.passwords_file.parent.mkdir(parents=True, exist_ok=True)
        self.passwords_file.write_text(json.dumps({AIRFLOW_USER: self.secrets.admin_password}) + "\n")
        self.passwords_file.chmod(0o600)

    # -- the Airflow REST API, as a user would call it ------------------------------------------
    def api(self) -> Any:
        """An httpx client of /api/v2 logged in as the admin (a JWT from /auth/token)."""
        import httpx

        response = httpx.post(f"{self.airflow_url}/auth/token", timeout=30,
                              json={"username": AIRFLOW_USER, "password": self.secrets.admin_password})
        response.raise_for_status()
        token = response.json()["access_token"]
        return httpx.Client(base_url=f"{self.airflow_url}/api/v2", timeout=30,
                            headers={"Authorization": f"Bearer {token}"})

    def trigger(self, dag_id: str, parse_timeout: float = 240.0) -> str:
        """Wait until the DAG is parsed, then start a run; returns its run id."""
        with self.api() as client:
            deadline = time.monotonic() + parse_timeout
            while client.get(f"/dags/{dag_id}").status_code != 200:
                if time.monotonic() > deadline:
                    raise ClusterError(f"{dag_id} was never parsed\n{self.log_tail('airflow-dag-processor')}")
                time.sleep(1)
            response = client.post(f"/dags/{dag_id}/dagRuns", json={"logical_date": None, "conf": {}})
            if response.status_code not in (200, 201):
                raise ClusterError(f"triggering {dag_id} failed: {response.status_code} {response.text}")
            return str(response.json()["dag_run_id"])

    def wait_for_run(self, dag_id: str, run_id: str, timeout: float = 300.0) -> dict[str, Any]:
        """The run once it has ended (success or failed), with the states of its task instances."""
        with self.api() as client:
            deadline = time.monotonic() + timeout
            while True:
                run = client.get(f"/dags/{dag_id}/dagRuns/{run_id}").json()
                if run.get("state") in ("success", "failed") or time.monotonic() > deadline:
                    instances = client.get(f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances").json()
                    run["task_states"] = {ti["task_id"]: ti["state"] for ti in instances.get("task_instances", [])}
                    return run
                time.sleep(2)

    def describe(self) -> str:
        mongo = redact(self.resolved_mongo_uri)
        proxies = ", ".join(f"{name.removeprefix('AIRFLOW_CONN_PROXY_')} {redact(url)}"
                            for name, url in self.proxy_environment().items())
        proxies = proxies or "none (browser tasks of a country without one are dead-lettered)"
        return (
            "\nHarvester cluster is running (the docker-compose topology, on loopback).\n"
            f"  Airflow UI:   {self.airflow_url}  user {AIRFLOW_USER}, password in {self.base_dir / 'secrets.json'}"
            " (admin_password)\n"
            f"  PostgreSQL:   {LOOPBACK}:{self.ports.postgres} (data {self.postgres_data})\n"
            f"  Redis:        {LOOPBACK}:{self.ports.redis} (password in secrets.json)\n"
            f"  MongoDB:      {mongo}\n"
            f"  Demo site:    {self.resolved_demo_site_url}\n"
            f"  Worker hosts: {', '.join(node for host in self.hosts for node in host.node_names())}\n"
            f"  Proxies:      {proxies}\n"
            f"  Logs:         {self.log_dir}/\n"
            "  Stop:         make stop MODE=cluster\n"
        )


# -- process groups ------------------------------------------------------------------------------
def postgres_bin() -> Path:
    """The directory of the Debian package's server binaries (initdb and postgres are not on PATH there)."""
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parts[-3]))
    if not candidates:
        raise ClusterError("PostgreSQL is not installed: apt-get install -y postgresql (scripts/bootstrap.sh does)")
    return candidates[-1].parent


def group_alive(pgid: int) -> bool:
    """True while any process of the group is alive (zombies do not count)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


def wait_group_gone(pgid: int, timeout: float, reap: Callable[[], None] | None = None) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if reap is not None:
            reap()
        if not group_alive(pgid):
            return True
        time.sleep(0.2)
    return False


_STARTED = time.monotonic()


def step(message: str) -> None:
    print(f"==> [{time.monotonic() - _STARTED:6.1f}s] {message}", flush=True)


# -- make run MODE=cluster / make stop MODE=cluster ----------------------------------------------
def local_cluster(environ: dict[str, str] | None = None) -> Cluster:
    environ = dict(os.environ if environ is None else environ)
    return Cluster(base_dir=REPOSITORY_ROOT / "var" / "cluster", ports=ClusterPorts.from_environment(environ),
                   mongo_uri=environ.get("HARVESTER_MONGO_URI"), demo_proxies=True, environ=environ)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harvester.services.cluster", description=__doc__)
    parser.add_argument("action", choices=["run", "stop", "status"])
    parser.add_argument("--no-trigger", action="store_true", help="do not trigger the demo DAG")
    args = parser.parse_args(argv)
    cluster = local_cluster()
    if args.action == "stop":
        cluster.stop()
        step("stopped")
        return 0
    if args.action == "status":
        running = True
        for service in cluster.all_services():
            pgid = PidFile(cluster.run_dir / f"{service.name}.pid").read()
            alive = pgid is not None and group_alive(pgid)
            running &= alive
            print(f"  {service.name:<24} {'running (group ' + str(pgid) + ')' if alive else 'stopped'}")
        return 0 if running else 3
    try:
        cluster.start()
        if not args.no_trigger:
            from harvester.services.stack import DEMO_SOURCE_DAG

            run_id = cluster.trigger(DEMO_SOURCE_DAG)
            step(f"airflow: triggered {DEMO_SOURCE_DAG} ({run_id})")
    except ClusterError as error:
        print(f"\n!! {error}", file=sys.stderr)
        return 1
    print(cluster.describe(), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
