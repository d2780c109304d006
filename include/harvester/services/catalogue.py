"""The services both launcher modes run, declared once: Redis, MongoDB, the demo site, a Celery worker's
command, and a counting forward proxy for each browser country that has no proxy of its own."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from harvester.services import readiness
from harvester.services.launcher import VENV_BIN, Service
from harvester.services.mongo import MongoChoice
from harvester.services.ports import LOOPBACK

CELERY_APP = "harvester.workers.celery_app"
DEMO_SOURCE_DAG = "harvest_demo_shop"  # the demo source's DAG, which both modes trigger after the start


def redis_server(port: int, data_dir: Path, env: Mapping[str, str], url: str, port_variable: str,
                 password: str | None = None) -> Service:
    """AOF on, loopback only; with ``password`` clients must authenticate (as compose's redis)."""
    command = ["redis-server", "--bind", LOOPBACK, "--port", str(port), "--dir", str(data_dir),
               "--appendonly", "yes", "--appendfsync", "everysec", "--save", ""]
    command += ["--requirepass", password] if password else ["--protected-mode", "yes"]
    return Service("redis", [command], env, port=port, port_variable=port_variable,
                   ready=lambda: readiness.redis_ping(url), ready_timeout=20, directories=(data_dir,))


def redis_replica(name: str, port: int, primary_port: int, data_dir: Path, env: Mapping[str, str], url: str,
                  port_variable: str, password: str | None = None) -> Service:
    """A replica of the Redis on ``primary_port`` (asynchronous replication, AOF on as the primary's). Its
    ``masterauth`` is the shared password, so it can follow whichever server the sentinels promote."""
    service = redis_server(port, data_dir, env, url, port_variable, password)
    auth = ["--masterauth", password] if password else []
    return replace(service, name=name, commands=[[*service.command, "--replicaof", LOOPBACK, str(primary_port),
                                                   *auth]])


@dataclass(frozen=True)
class SentinelPlan:
    """Redis Sentinel for one primary: how soon the sentinels call it down and fail over.

    ``down_after_ms``: a primary that has not answered this long is subjectively down (Redis' default is
    30 s; a short value fails over sooner and risks a failover on a slow host); ``failover_timeout_ms``: a
    failover that stalls is retried by another sentinel after it (and a sentinel waits twice this before
    failing over the same primary again)."""

    master_name: str = "harvester"
    quorum: int = 2
    down_after_ms: int = 5000
    failover_timeout_ms: int = 30_000


def sentinel_configuration(port: int, data_dir: Path, primary_port: int, plan: SentinelPlan,
                           password: str | None = None) -> str:
    """sentinel.conf for a sentinel on loopback watching the primary on ``primary_port``; it rewrites the
    file itself as the primary changes. ``password``: the Redis password (``auth-pass``) and, as in
    compose, the sentinel's own (``requirepass``: the same secret, one fewer to keep)."""
    lines = [f"port {port}", f"bind {LOOPBACK}", f"dir {data_dir}",
             f"sentinel monitor {plan.master_name} {LOOPBACK} {primary_port} {plan.quorum}",
             f"sentinel down-after-milliseconds {plan.master_name} {plan.down_after_ms}",
             f"sentinel failover-timeout {plan.master_name} {plan.failover_timeout_ms}",
             f"sentinel parallel-syncs {plan.master_name} 1"]
    if password:
        lines += [f"sentinel auth-pass {plan.master_name} {password}", f"requirepass {password}"]
    return "\n".join(lines) + "\n"


def redis_sentinel(name: str, port: int, primary_port: int, data_dir: Path, env: Mapping[str, str],
                   port_variable: str, plan: SentinelPlan, password: str | None = None) -> Service:
    """One Redis Sentinel (``redis-server <conf> --sentinel``: Debian's redis-sentinel is that binary)."""
    config = data_dir / "sentinel.conf"
    return Service(name, [["redis-server", str(config), "--sentinel"]], env, port=port, port_variable=port_variable,
                   ready=lambda: readiness.sentinel_knows_primary(port, plan.master_name, password),
                   ready_timeout=20, directories=(data_dir,),
                   files=((config, sentinel_configuration(port, data_dir, primary_port, plan, password)),))


def mongo_server(choice: MongoChoice, data_dir: Path, port: int, env: Mapping[str, str], port_variable: str,
                 ready_timeout: float = 60) -> list[Service]:
    """The local MongoDB server to start, if the choice is one (an external MongoDB is none)."""
    if choice.command is None:
        return []
    directories = (data_dir / "mongod",) if choice.kind == "mongod" else ()
    return [Service("mongo", [choice.command], env, port=port, port_variable=port_variable,
                    ready=lambda: readiness.mongo_ping(choice.uri), ready_timeout=ready_timeout,
                    directories=directories)]


def demo_site(port: int, env: Mapping[str, str], port_variable: str) -> Service:
    """The demo target site (the demo package, demo/), on loopback."""
    return Service("demo-site", [[str(VENV_BIN / "harvester-demo-site"), "--host", LOOPBACK, "--port", str(port)]],
                   env, port=port, port_variable=port_variable,
                   ready=lambda: readiness.http_ok(f"http://{LOOPBACK}:{port}/"), ready_timeout=30)


def celery_worker_command(queue: str, node: str, concurrency: int, pool: str | None = None) -> list[str]:
    """A Harvester Celery worker consuming one queue, as compose's worker services run it."""
    return [str(VENV_BIN / "celery"), "-A", CELERY_APP, "worker", "--loglevel", "INFO", "-Q", queue, "-n", node,
            *(["--pool", pool] if pool else []), "--concurrency", str(concurrency)]


def airflow_environment(root: Path, home: Path, port: int, refresh_seconds: int,
                        min_file_process_seconds: int) -> dict[str, str]:
    """What a local Airflow of either mode is configured with: the DAGs and plugins of the checkout at
    ``root``, no examples, DAGs unpaused, the API server (and the execution API its tasks call) on ``port``."""
    url = f"http://{LOOPBACK}:{port}"
    return {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(root / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(root / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{url}/execution/",
        "AIRFLOW__API__HOST": LOOPBACK,
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__BASE_URL": url,
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": str(refresh_seconds),
        "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": str(min_file_process_seconds),
    }


def browser_countries(sources_dir: Path) -> list[str]:
    """Countries of the browser sources: each needs a proxy before a page slot may open a page for it."""
    from harvester.config import load_sources

    return sorted({source.country for source in load_sources(sources_dir).sources.values()
                   if source.render == "browser" and source.country})


@dataclass(frozen=True)
class CountryProxies:
    """The forward proxy of each browser country: the caller's (``AIRFLOW_CONN_PROXY_<C>`` in ``environ``, or
    ``given``), else a counting one started on loopback, ports from ``first_port`` on (None: start none)."""

    countries: list[str]
    environ: Mapping[str, str]
    given: Mapping[str, str] = field(default_factory=dict)
    first_port: int | None = None

    def started(self) -> dict[str, int]:
        """Country -> port of each proxy to start."""
        from harvester.pageslots import proxy_environment_variable

        if self.first_port is None:
            return {}
        countries = [country for country in self.countries
                     if country not in self.given and proxy_environment_variable(country) not in self.environ]
        return {country: self.first_port + index for index, country in enumerate(countries)}

    def environment(self) -> dict[str, str]:
        """``AIRFLOW_CONN_PROXY_<C>`` for every country that has a proxy (configured, given or started)."""
        from harvester.pageslots import proxy_environment_variable

        configured = {country: self.environ[proxy_environment_variable(country)] for country in self.countries
                      if proxy_environment_variable(country) in self.environ}
        started = {country: f"http://{LOOPBACK}:{port}" for country, port in self.started().items()}
        return {proxy_environment_variable(country): url
                for country, url in {**configured, **started, **self.given}.items()}

    def services(self, env: Mapping[str, str], port_variable: str) -> list[Service]:
        """`harvester forward-proxy` per started proxy, labelled with its country."""
        return [Service(f"proxy-{country}", [[str(VENV_BIN / "harvester"), "forward-proxy", "--host", LOOPBACK,
                                               "--port", str(port), "--label", country]],
                        env, port=port, port_variable=port_variable,
                        ready=functools.partial(readiness.tcp_open, LOOPBACK, port), ready_timeout=20)
                for country, port in self.started().items()]
