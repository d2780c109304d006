"""`make run`, `make stop`, `make status`: the local embedded stack on loopback.

Every service is started in its own process group with a PID file in var/run/ and a log in var/log/,
so running twice starts nothing twice and `make stop` stops exactly what was started.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from harvester.services import readiness
from harvester.services.mongo import MongoChoice, airflow_connection_uri, choose_mongo, redact
from harvester.services.pidfiles import PidFile, stop_process_group
from harvester.services.ports import LOOPBACK, is_port_free
from harvester.settings import REPOSITORY_ROOT

DEMO_SOURCE_DAG = "harvest_demo_shop"


@dataclass(frozen=True)
class Ports:
    redis: int = 6379
    mongo: int = 27017
    demo_site: int = 8008
    airflow: int = 8080
    forward_proxy: int = 3128  # the first demo country's proxy; the next countries take the next ports

    @classmethod
    def from_environment(cls, environ: dict[str, str]) -> Ports:
        """Each port can be moved with HARVESTER_RUN_<NAME>_PORT (e.g. when 8080 is taken)."""
        defaults = cls()
        return cls(**{
            name: int(environ.get(f"HARVESTER_RUN_{name.upper()}_PORT", getattr(defaults, name)))
            for name in ("redis", "mongo", "demo_site", "airflow", "forward_proxy")
        })


@dataclass
class Service:
    name: str
    command: list[str]
    port: int | None = None
    ready: Callable[[], bool] | None = None
    ready_timeout: float = 60.0
    extra_env: dict[str, str] = field(default_factory=dict)


class LocalStack:
    """The services of `make run`, in start order."""

    def __init__(self, root: Path = REPOSITORY_ROOT, environ: dict[str, str] | None = None) -> None:
        self.root = root
        self.environ = dict(os.environ if environ is None else environ)
        self.ports = Ports.from_environment(self.environ)
        self.var = root / "var"
        self.run_dir = self.var / "run"
        self.log_dir = self.var / "log"
        self.bin = Path(sys.executable).parent
        self.mongo: MongoChoice = choose_mongo(self.ports.mongo, self.var / "data", self.environ)

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

    def environment(self) -> dict[str, str]:
        """The environment every service (and every Airflow task) runs with."""
        env = dict(self.environ)
        airflow_home = self.var / "airflow"
        env.update({
            "HARVESTER_REDIS_URL": self.redis_url,
            "HARVESTER_MONGO_URI": self.mongo.uri,
            "HARVESTER_DEMO_SITE_URL": self.demo_site_url,
            # the demo site is on loopback: allow exactly its port (redirects to Redis, MongoDB or cloud
            # metadata stay refused); a deployment's own private networks go in the same variable
            "HARVESTER_ALLOWED_PRIVATE_NETWORKS": self.environ.get(
                "HARVESTER_ALLOWED_PRIVATE_NETWORKS", f"{LOOPBACK}/32:{self.ports.demo_site}"),
            "AIRFLOW_HOME": str(airflow_home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(self.root / "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(self.root / "plugins"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "4",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.airflow_url}/execution/",
            "AIRFLOW__API__HOST": LOOPBACK,
            "AIRFLOW__API__PORT": str(self.ports.airflow),
            "AIRFLOW__API__BASE_URL": self.airflow_url,
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "30",
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "10",
            "PATH": f"{self.bin}{os.pathsep}{env.get('PATH', '')}",
        })
        for country, port in self.demo_proxies().items():  # the demo's proxies, as Airflow connections
            env[f"AIRFLOW_CONN_PROXY_{country}"] = f"http://{LOOPBACK}:{port}"
        return env

    def browser_countries(self) -> list[str]:
        """Countries of the browser sources: each gets a local forward proxy unless one is configured."""
        from harvester.config.loader import load_sources

        directory = self.environ.get("HARVESTER_SOURCES_DIR") or self.root / "include" / "sources"
        return sorted({source.country for source in load_sources(directory).sources.values()
                       if source.render == "browser" and source.country})

    def demo_proxies(self) -> dict[str, int]:
        """Country -> port of the demo forward proxy `make run` starts for it (a configured
        AIRFLOW_CONN_PROXY_<COUNTRY> wins: then none is started for that country)."""
        from harvester.pageslots.proxies import proxy_environment_variable

        countries = [c for c in self.browser_countries() if proxy_environment_variable(c) not in self.environ]
        return {country: self.ports.forward_proxy + index for index, country in enumerate(countries)}

    def page_slot_capacity(self) -> int:
        """Slots the local slot host hosts (its pool size): HARVESTER_RUN_PAGE_SLOTS, default 2."""
        return int(self.environ.get("HARVESTER_RUN_PAGE_SLOTS", "2"))

    def services(self) -> list[Service]:
        bin_ = self.bin
        celery = [str(bin_ / "celery"), "-A", "harvester.workers.celery_app", "worker", "--loglevel", "INFO"]
        services = [
            Service(
                "redis",
                ["redis-server", "--bind", LOOPBACK, "--port", str(self.ports.redis),
                 "--dir", str(self.var / "data" / "redis"), "--appendonly", "yes",
                 "--appendfsync", "everysec", "--save", "", "--protected-mode", "yes"],
                port=self.ports.redis,
                ready=lambda: readiness.redis_ping(self.redis_url),
                ready_timeout=20,
            ),
        ]
        if self.mongo.command is not None:
            services.append(Service(
                "mongo", self.mongo.command, port=self.ports.mongo,
                ready=lambda: readiness.mongo_ping(self.mongo.uri), ready_timeout=60,
            ))
        services += [
            Service(
                "demo-site",
                [str(bin_ / "harvester"), "demo-site", "--host", LOOPBACK, "--port", str(self.ports.demo_site)],
                port=self.ports.demo_site,
                ready=lambda: readiness.http_ok(self.demo_site_url + "/"),
                ready_timeout=30,
            ),
            Service(
                "airflow",
                [str(bin_ / "airflow"), "standalone"],
                port=self.ports.airflow,
                ready=lambda: readiness.http_ok(self.airflow_url + "/api/v2/monitor/health"),
                ready_timeout=240,
            ),
            Service("worker-priority", [*celery, "-Q", "priority", "-n", "priority@%h", "--concurrency", "2"]),
            Service("worker-default", [*celery, "-Q", "default", "-n", "default@%h", "--concurrency", "2"]),
            *(Service(f"proxy-{country}", [str(bin_ / "harvester"), "forward-proxy", "--host", LOOPBACK,
                                           "--port", str(port), "--label", country],
                      port=port, ready=lambda port=port: readiness.tcp_open(LOOPBACK, port), ready_timeout=20)
              for country, port in self.demo_proxies().items()),
            Service(  # a slot host: one page slot per pool process (prefork)
                "worker-pageslots",
                [*celery, "-Q", "pageslots", "-n", "pageslots@%h", "--concurrency", str(self.page_slot_capacity())],
            ),
            Service("distributor", [str(bin_ / "harvester"), "distributor"]),
        ]
        return services

    # -- actions -------------------------------------------------------------------------------
    def pid_file(self, service: Service) -> PidFile:
        return PidFile(self.run_dir / f"{service.name}.pid")

    def log_path(self, service: Service) -> Path:
        return self.log_dir / f"{service.name}.log"

    def start(self, service: Service, env: dict[str, str]) -> None:
        pid_file = self.pid_file(service)
        if (pid := pid_file.running_pid()) is not None:
            step(f"{service.name}: already running (pid {pid})")
            return
        if service.port is not None and not is_port_free(service.port):
            fail(service, self.log_path(service),
                 f"port {LOOPBACK}:{service.port} is taken by another program; stop it or set "
                 f"HARVESTER_RUN_{service.name.upper().replace('-', '_')}_PORT to another port")
        step(f"{service.name}: starting" + (f" on {LOOPBACK}:{service.port}" if service.port else ""))
        (self.var / "data" / "redis").mkdir(parents=True, exist_ok=True)
        (self.var / "data" / "mongod").mkdir(parents=True, exist_ok=True)
        log_path = self.log_path(service)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("ab") as log:
            process = subprocess.Popen(
                service.command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env={**env, **service.extra_env}, cwd=self.root, start_new_session=True,
            )
        pid_file.write(process.pid)
        if service.ready is None:
            time.sleep(1.0)
            if process.poll() is not None:
                fail(service, log_path, f"exited with code {process.returncode}")
            return
        try:
            readiness.wait_until(
                lambda: process.poll() is None and service.ready(), service.ready_timeout, service.name
            )
        except readiness.ServiceNotReady as error:
            code = process.poll()
            fail(service, log_path, f"exited with code {code}" if code is not None else str(error))

    def run(self, trigger: bool = True) -> None:
        env = self.environment()
        step(f"MongoDB: {self.mongo.describe()}")
        for service in self.services():
            self.start(service, env)
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

    def write_environment_file(self, env: dict[str, str]) -> None:
        """``var/run/harvester.env``, owner-only (0600): it holds every password of the environment.

        Written to a private temporary file and renamed over the old one, so the secrets are never
        readable by others, not even for a moment, and an older world-readable file is replaced.
        """
        keys = sorted(k for k in env if k.startswith(("HARVESTER_", "AIRFLOW_", "AIRFLOW__")))
        lines = [f"export {key}={json.dumps(env[key])}" for key in keys]
        path = self.run_dir / "harvester.env"
        temporary = path.with_name(f".{path.name}.{os.getpid()}")
        temporary.unlink(missing_ok=True)
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            handle.write("\n".join(lines) + "\n")
        os.replace(temporary, path)

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

    def stop(self) -> None:
        for service in reversed(self.services()):
            pid_file = self.pid_file(service)
            pid = pid_file.running_pid()
            if pid is None:
                continue
            step(f"{service.name}: stopping (pid {pid})")
            stop_process_group(pid)
            pid_file.remove()
        step("stopped")

    def status(self) -> bool:
        """Print what runs; True when every service runs."""
        all_running = True
        for service in self.services():
            pid = self.pid_file(service).running_pid()
            port = f"{LOOPBACK}:{service.port}" if service.port else ""
            state = f"running (pid {pid})" if pid else "stopped"
            all_running &= pid is not None
            print(f"  {service.name:<18} {state:<22} {port:<18} log: {self.log_path(service)}")
        print(f"  MongoDB: {self.mongo.describe()}")
        return all_running


def step(message: str) -> None:
    print(f"==> {message}", flush=True)


def fail(service: Service, log_path: Path, reason: str) -> None:
    print(f"\n!! step '{service.name}' failed: {reason}\n   its log: {log_path}", file=sys.stderr)
    if log_path.exists():
        tail = log_path.read_text(errors="replace").splitlines()[-15:]
        print("   last lines:\n     " + "\n     ".join(tail), file=sys.stderr)
    raise SystemExit(1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harvester.services.stack", description=__doc__)
    parser.add_argument("action", choices=["run", "stop", "status"])
    parser.add_argument("--no-trigger", action="store_true", help="do not trigger the demo DAG")
    args = parser.parse_args(argv)
    stack = LocalStack()
    if args.action == "run":
        stack.run(trigger=not args.no_trigger)
    elif args.action == "stop":
        stack.stop()
    else:
        return 0 if stack.status() else 3
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
