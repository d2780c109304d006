"""Slow and dead hosts isolated: a source over many loopback hosts, some refusing connections (a closed
port), one answering after 10 s. The live hosts' items are all stored; the unreachable hosts' tasks are counted
``host_unreachable``, their breaker opens, and they are deferred past the host's pause without spending a retry,
never dead-lettered while paused."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml
from harvester.config.model import SourceConfig
from harvester.distributor import TaskMessage
from harvester.observability.views import HarvestViews
from harvester.redis_keys import SourceKeys
from harvester.settings import HarvesterSettings
from harvester.workers.batch import BatchRunner

from tests.workers.conftest import Crawl

pytestmark = pytest.mark.integration

LIVE_HOSTS = ("127.0.0.21", "127.0.0.22", "127.0.0.23")
DEAD_HOSTS = ("127.0.0.31", "127.0.0.32")
SLOW_HOST = "127.0.0.41"
PAGES_PER_HOST = 3
SLOW_SECONDS = 10.0


class _Page(BaseHTTPRequestHandler):
    delay = 0.0

    def do_GET(self) -> None:  # http.server calls it by this name
        time.sleep(self.delay)
        host = self.server.server_address[0]
        body = f"<html><h1 class='title'>{host}</h1><p class='sku'>SKU-{host}{self.path}</p></html>".encode()
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except OSError:  # the fetcher gave up on a slow answer
            pass

    def log_message(self, *args: object) -> None:
        return None


class _SlowPage(_Page):
    delay = SLOW_SECONDS


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def loopback_web() -> Iterator[int]:
    """One port on which every live host and the slow host serve pages; nothing listens there on the dead hosts."""
    port = _free_port()
    servers = [ThreadingHTTPServer((host, port), _Page) for host in LIVE_HOSTS]
    servers.append(ThreadingHTTPServer((SLOW_HOST, port), _SlowPage))
    for server in servers:
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
    yield port
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture
def breaker_settings(configure_settings: Callable[..., HarvesterSettings]) -> HarvesterSettings:
    return configure_settings(retry_base_seconds=0.2, retry_max_seconds=1, heartbeat_seconds=1, lease_seconds=30,
                              allowed_private_networks="127.0.0.0/8", first_byte_timeout_seconds=1,
                              connect_timeout_seconds=1, host_breaker_failures=2, host_breaker_pause_seconds=60)


def _source(settings: HarvesterSettings, port: int) -> SourceConfig:
    document = {
        "name": "broad_breaker", "input": {"seeds": [f"http://{LIVE_HOSTS[0]}:{port}/p/0"], "kind": "details"},
        "attributes": {"sku": {"css": ".sku", "required": True}, "title": {"css": "h1.title"}},
        "output": {"key": ["url"]}, "robots": "ignore",
        "rate_limit": {"max_active": 64, "per_minute": 100_000}, "retries": 1, "timeout": 20,
    }
    (settings.sources_dir / "broad_breaker.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    return SourceConfig.model_validate(document)


def test_dead_and_slow_hosts_are_deferred_while_live_hosts_are_all_stored(
        breaker_settings, loopback_web, redis_client, mongo_server) -> None:
    port = loopback_web
    source = _source(breaker_settings, port)
    runner = BatchRunner(breaker_settings)
    try:
        crawl = Crawl(runner, redis_client)
        messages = [TaskMessage(source=source.name, url=f"http://{host}:{port}/p/{page}")
                    for page in range(PAGES_PER_HOST) for host in (*LIVE_HOSTS, *DEAD_HOSTS, SLOW_HOST)]
        crawl.push(source, *messages)
        started = time.monotonic()
        deadline = started + 30
        while time.monotonic() < deadline:
            if crawl.step(source, batch=8) is None:
                due = redis_client.zrangebyscore(SourceKeys(source.name).delayed, "-inf", time.time() + 0.5)
                if not due:
                    break
                time.sleep(0.3)
        elapsed = time.monotonic() - started
        records = mongo_server.client()[breaker_settings.mongo_database][source.output_collection]
        stored = {record["url"] for record in records.find({}, {"url": 1})}
        assert stored == {f"http://{host}:{port}/p/{page}" for host in LIVE_HOSTS for page in range(PAGES_PER_HOST)}
        keys = SourceKeys(source.name)
        assert redis_client.llen(keys.dead_letters) == 0, "an unreachable host's task was dead-lettered while paused"
        deferred = [json.loads(raw) for raw in redis_client.zrange(keys.delayed, 0, -1)]
        # never admitted (the host is paused): in intake, or in the host's own queue where admission moved them
        hosts_waiting = redis_client.zrange(keys.host_ready, 0, -1)
        queues = [keys.intake, *(keys.host_queue(host.decode()) for host in hosts_waiting)]
        waiting = [json.loads(raw) for queue in queues for raw in redis_client.lrange(queue, 0, -1)]
        unreachable_hosts = {*DEAD_HOSTS, SLOW_HOST}
        assert {task["url"].split("//")[1].split(":")[0] for task in deferred} == unreachable_hosts
        assert sorted(task["url"] for task in deferred + waiting) == sorted(
            f"http://{host}:{port}/p/{page}" for host in unreachable_hosts for page in range(PAGES_PER_HOST))
        # at most the failures before the breaker opened spent a retry (host_breaker_failures - 1 per host)
        assert all(task["attempt"] <= 1 for task in deferred)
        paused = {key.decode(): float(value) for key, value in redis_client.hgetall(keys.host_paused).items()}
        paused_hosts = {f"{host}:{port}" for host in unreachable_hosts}  # host_of: a host and its port
        assert paused_hosts <= set(paused) and min(paused[host] for host in paused_hosts) > time.time() + 30
        counters = {key.decode(): int(value) for key, value in redis_client.hgetall(keys.counters).items()}
        assert counters["outcome:host_unreachable"] >= len(deferred)
        assert counters["outcome:host_breaker_opened"] == len(unreachable_hosts)
        assert elapsed < SLOW_SECONDS * 2, "the slow host held the crawl up"
        database = mongo_server.client()[breaker_settings.mongo_database]
        page = HarvestViews(redis_client, database, {source.name: source}, lambda _: database,
                            breaker_settings).source_summary(source.name)  # the Harvester page's row
        assert page.host_unreachable == counters["outcome:host_unreachable"]
        assert {f"{host}:{port}" for host in unreachable_hosts} <= set(page.paused_hosts)
    finally:
        runner.close()


def test_a_failed_probe_after_the_pause_reopens_the_breaker_at_once_for_twice_as_long(redis_client) -> None:
    """With ``host_breaker_failures`` above 1, the probe after a pause is one page: its failure alone reopens the
    breaker (for twice the pause), rather than the host being fetched ``threshold`` times again at full cost."""
    from harvester.workers.host_breaker import HostBreaker

    pause = 0.4
    breaker = HostBreaker(redis_client, threshold=3, pause_seconds=pause, max_pause_seconds=60, deferrals=4)
    host = "gone.example:80"
    assert breaker.record("probe_source", {host: (2, 0)})[host].state == "closed"  # below the threshold
    opened = breaker.record("probe_source", {host: (1, 0)})[host]
    assert (opened.state, opened.openings) == ("opened", 1) and opened.open_seconds == pytest.approx(pause, abs=0.01)
    assert breaker.record("probe_source", {host: (1, 0)})[host].state == "open"  # while paused: nothing changes
    time.sleep(pause + 0.1)
    reopened = breaker.record("probe_source", {host: (1, 0)})[host]  # the probe fails
    assert (reopened.state, reopened.openings) == ("opened", 2), reopened
    assert reopened.open_seconds == pytest.approx(pause * 2, abs=0.01)
    time.sleep(pause * 2 + 0.1)
    assert breaker.record("probe_source", {host: (0, 1)})[host].state == "closed"  # a response closes it
    # closed again: the next failures count from zero to the threshold
    assert breaker.record("probe_source", {host: (1, 0)})[host].state == "closed"
    assert breaker.record("probe_source", {host: (2, 0)})[host].openings == 1
