"""One source over a few hundred sites, end to end through the DAG: `airflow dags test` of the source's producer
DAG against real Redis, MongoDB, the distributor, Celery workers and a loopback web of many hosts
(:mod:`harvester_demo.many_hosts`, one process serving distinct 127.20.x.y addresses).

The source's input lists its pages host by host (a few big hosts first, then 300 small ones), as a broad input is
written; 5 % of the hosts refuse connections and 5 % answer past the first-byte timeout. The run stores every live
host's pages once, counts the others ``host_unreachable`` after their breakers opened (their tasks deferred, not
each one burning its retries), never asks a host for two pages at once nor past its per-minute, and its report
gives the per-host figures.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from harvester.redis_keys import SourceKeys
from harvester.services import readiness
from harvester.services.ports import free_ports
from harvester.settings import HarvesterSettings
from harvester_demo import many_hosts

from tests.fixtures.servers import ServerGroup, ServerProcess
from tests.producer.test_dag_end_to_end import (  # noqa: F401 (airflow_home, dag_settings: fixtures)
    _dags_test,
    _report,
    _write_source,
    airflow_home,
    dag_settings,
)

pytestmark = [pytest.mark.integration, pytest.mark.airflow, pytest.mark.slow]

SMALL_HOSTS, SMALL_PAGES = 300, 2
BIG_HOSTS, BIG_PAGES = (1, 2, 3), 10  # normal hosts (many_hosts.host_kind) with more pages, first in the input
PER_MINUTE = 60  # the source's per_host_per_minute, and what the server holds it to
SLOW_SECONDS = 3.0  # a slow host's answer, past the first-byte timeout below
FIRST_BYTE_TIMEOUT = 1.0


class LoopbackWeb:
    """The many-hosts server, and what it counted."""

    def __init__(self, process: ServerProcess, port: int, control_port: int) -> None:
        self.process, self.port, self.control_port = process, port, control_port

    def stats(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://{many_hosts.CONTROL_ADDRESS}:{self.control_port}/_stats",
                                    timeout=10) as response:
            return json.load(response)

    def url(self, index: int, page: int) -> str:
        return f"http://{many_hosts.host_address(index)}:{self.port}/page/{page}"


@pytest.fixture
def loopback_web(tmp_path: Path) -> LoopbackWeb:
    """``SMALL_HOSTS`` hosts on one port, in a process of its own (stopped after the test)."""
    port, control_port = free_ports(2)
    demo_directory = str(Path(many_hosts.__file__).resolve().parents[1])  # this checkout's demo, not another's
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [demo_directory, os.environ.get("PYTHONPATH")]))}
    group = ServerGroup()
    process = group.start(ServerProcess(
        "many-hosts", [sys.executable, "-m", many_hosts.__name__, "--hosts", str(SMALL_HOSTS), "--port", str(port),
                       "--control-port", str(control_port), "--per-minute", str(PER_MINUTE),
                       "--slow-seconds", str(SLOW_SECONDS)],
        tmp_path / "many-hosts.log", ready=lambda: readiness.tcp_open(many_hosts.CONTROL_ADDRESS, control_port),
        env=env), timeout=60)
    yield LoopbackWeb(process, port, control_port)
    group.stop()


@pytest.fixture
def broad_settings(dag_settings: HarvesterSettings,  # noqa: F811
                   configure_settings: Callable[..., HarvesterSettings]) -> HarvesterSettings:
    """The DAG test's settings, with the loopback web's network allowed (127/8 is refused by the address rules
    otherwise), short connect and first-byte timeouts, and a breaker that opens after two unreachable pages in
    a row for 1 s (doubled per opening), deferring a host's tasks through two openings."""
    return configure_settings(allowed_private_networks=many_hosts.NETWORK, connect_timeout_seconds=1,
                              first_byte_timeout_seconds=FIRST_BYTE_TIMEOUT, host_breaker_failures=2,
                              host_breaker_pause_seconds=1, host_breaker_deferrals=2)


def _input_urls(web: LoopbackWeb) -> list[str]:
    """Host by host: the big hosts' pages first, then every host's two."""
    big = [web.url(index, page) for index in BIG_HOSTS for page in range(SMALL_PAGES, BIG_PAGES)]
    return big + [web.url(index, page) for index in range(SMALL_HOSTS) for page in range(SMALL_PAGES)]


@pytest.mark.timeout(300)
def test_one_source_over_300_hosts_through_the_dag(
        airflow_home, broad_settings, loopback_web, mongo_server, celery_worker_factory,  # noqa: F811
        start_distributor, redis_client, tmp_path) -> None:
    name, web = "e2e_dag_broad", loopback_web
    urls = _input_urls(web)
    kinds = {index: many_hosts.host_kind(index) for index in range(SMALL_HOSTS)}
    live_urls = {url for url in urls if kinds[int(_index_of(url))] == "normal"}
    unreachable = {many_hosts.host_address(index) for index, kind in kinds.items() if kind != "normal"}
    database = mongo_server.client()[broad_settings.mongo_database]
    database["broad_input"].insert_many([{"url": url} for url in urls])
    _write_source(broad_settings, {
        "name": name, "input": {"kind": "details", "mongo": {"collection": "broad_input"}},
        "attributes": {"title": {"css": "h1::text", "required": True}, "price": {"css": ".price::text"}},
        "output": {"key": ["url"]}, "robots": "ignore", "harvesting_lag": 0, "retries": 1, "timeout": 10,
        "batch": {"size": 100, "max_packages": 20},
        "quality": {"max_dead_share": 0.15},  # a tenth of the hosts are gone: their pages end dead, as expected
        "rate_limit": {"max_active": 32, "per_minute": 100_000, "per_host_max_active": 1,
                       "per_host_per_minute": PER_MINUTE},
    })
    start_distributor()
    celery_worker_factory(queues="default,priority", concurrency=2)

    log_path = tmp_path / "dags-test.log"
    _dags_test(airflow_home, f"harvest_{name}", log_path, timeout=240)
    report = _report(database, name)
    log_tail = log_path.read_text(errors="replace")[-3000:]

    # every live host's pages stored exactly once
    output = database[name]
    stored = [record["url"] for record in output.find({}, {"url": 1})]
    assert sorted(stored) == sorted(live_urls), (len(stored), len(live_urls), log_tail)
    assert report["complete"] and report["records_stored"] == len(live_urls), report
    assert report["quality"]["outcome"] == "green", report["quality"]

    # the dead and slow hosts: counted host_unreachable, their breakers opened, their tasks deferred
    unreachable_pages = len(urls) - len(live_urls)
    assert report["failures_by_reason"] == {"host_unreachable": unreachable_pages}, report["failures_by_reason"]
    counters = {key.decode(): int(value) for key, value in redis_client.hgetall(SourceKeys(name).counters).items()}
    assert counters["outcome:host_breaker_opened"] >= len(unreachable), counters
    # each such host had a task deferred past its pause rather than retried (threshold 2, 2 pages a host)
    assert counters.get("outcome:deferred_host_unreachable", 0) >= len(unreachable), counters

    # politeness as the hosts saw it: one request in flight per host, PER_MINUTE starts a minute at most
    observed = web.stats()
    assert observed["violations"] == 0, observed["violating_hosts"]
    assert observed["served"].get("normal") == len(live_urls), observed  # no live page fetched twice

    # the report's per-host figures
    hosts = report["hosts"]
    assert hosts["hosts"] == SMALL_HOSTS and hosts["done"] >= SMALL_HOSTS - len(unreachable), hosts
    assert 0 <= hosts["paused"] <= len(unreachable) and "unreachable" in hosts, hosts
    slowest = [entry["host"].rsplit(":", 1)[0] for entry in hosts["slowest"]]
    assert slowest and set(slowest) <= unreachable, hosts["slowest"]  # a timeout outlasts any live page


def _index_of(url: str) -> int:
    """The many_hosts index of a page's host (127.20.x.y: x * 250 + y - 1)."""
    _, _, x, y = url.split("//", 1)[1].split(":", 1)[0].split(".")
    return int(x) * 250 + int(y) - 1
