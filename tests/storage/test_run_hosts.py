"""A run's figures per site host: recorded with each batch's fetches, joined with the live host state, given as
counts and a short list of the slowest hosts (real Redis and MongoDB)."""

from __future__ import annotations

import pytest
from harvester.distributor import TaskMessage
from harvester.metrics.collector import metrics_registry
from harvester.metrics.recording import record_fetches
from harvester.producer.progress import RunMonitor
from harvester.redis_keys import SourceKeys
from harvester.scraping.fetching.fetcher import FetchResult
from harvester.storage import RunHosts
from harvester.storage.run_hosts import SLOWEST_HOSTS

from tests.metrics.helpers import scrape, value

pytestmark = pytest.mark.integration

SOURCE = "many_sites"
RUN = "run-1"


def fetched(url: str, elapsed: float, outcome: str = "ok", status: int | None = 200) -> FetchResult:
    return FetchResult(url, outcome, status=status, elapsed=elapsed, started_at=1000.0)


def record_web(client, hosts: int = 8, source: str = SOURCE) -> None:
    """Two batches over ``hosts`` hosts: host N answers in N/10 s; host 0 is unreachable (nothing reached)."""
    for batch in range(2):
        messages, fetches = [], []
        for index in range(hosts):
            url = f"http://site{index}.test/page/{batch}"
            messages.append(TaskMessage(source=source, url=url, run_id=RUN, enqueued_at=999.0))
            fetches.append(fetched(url, 5.0, "host_unreachable", None) if index == 0 else fetched(url, index / 10))
        record_fetches(client, source, messages, fetches, now=1001.0)


def test_hosts_counted_by_state_with_the_slowest_named(redis_client) -> None:
    record_web(redis_client)
    keys = SourceKeys(SOURCE)
    now = float(redis_client.time()[0])
    redis_client.zadd(keys.host_ready, {"site3.test": now})  # tasks queued in its own queue
    redis_client.hset(keys.host_active_counts, "site4.test", 1)  # one in flight
    redis_client.hset(keys.host_paused, mapping={"site5.test": now + 60, "site6.test": now - 1})  # site6's is over
    redis_client.hset(keys.host_breakers, mapping={"site0.test|until": now + 60, "site0.test|openings": 1})
    redis_client.hset(keys.host_throttles, "site7.test", 6.0)

    assert redis_client.get(keys.hosts_run) == RUN.encode()  # the run the metrics read the live figures of
    figures = RunHosts(redis_client).read(SOURCE, RUN)
    assert figures.hosts == 8
    assert (figures.waiting, figures.in_flight, figures.paused, figures.unreachable, figures.slowed) == (1, 1, 1, 1, 1)
    assert figures.done == 8 - 3  # queued, in flight or paused hosts are not done; the others are
    assert len(figures.slowest) == SLOWEST_HOSTS
    assert figures.slowest[0] == {"host": "site0.test", "pages": 2, "mean_seconds": 5.0, "unreachable": 2}
    assert [entry["host"] for entry in figures.slowest[1:]] == ["site7.test", "site6.test", "site5.test",
                                                                 "site4.test"]
    assert figures.slowest[1]["mean_seconds"] == pytest.approx(0.7)


def test_metrics_give_counts_never_a_series_per_host(redis_client, harvester_settings) -> None:
    from harvester.config import SourceConfig
    from harvester.distributor import Intake

    for name, hosts in ((SOURCE, 40), ("few_sites", 3)):
        Intake(redis_client, harvester_settings).register_source(SourceConfig(
            name=name, input={"seeds": ["http://site0.test/"], "kind": "details"}, attributes={"title": {"css": "h1"}}))
        record_web(redis_client, hosts=hosts, source=name)
    samples = scrape(metrics_registry(redis_client, harvester_settings))
    assert value(samples, "harvester_hosts", source=SOURCE, state="all") == 40
    assert value(samples, "harvester_hosts", source=SOURCE, state="done") == 40
    assert value(samples, "harvester_hosts", source=SOURCE, state="paused") == 0
    assert value(samples, "harvester_slowest_host_fetch_seconds", source=SOURCE) == 5.0
    assert not [labels for _, labels in samples if any(name == "host" for name, _ in labels)]
    assert value(samples, "harvester_hosts", source="few_sites", state="all") == 3

    def series(source: str) -> int:
        return sum(1 for _, labels in samples if ("source", source) in labels)

    assert series(SOURCE) == series("few_sites")  # 40 hosts or 3: the same series


def test_the_report_and_the_progress_give_the_hosts(redis_client, mongo_server, mongo_database) -> None:
    database = mongo_server.client()[mongo_database]
    monitor = RunMonitor(database, database, redis_client)
    assert monitor.host_report(SOURCE, RUN) == {}  # no host figures: nothing to say
    record_web(redis_client)
    report = monitor.report_figures(SOURCE, "records", RUN)
    assert report["hosts"]["hosts"] == 8 and report["hosts"]["done"] == 8
    assert report["hosts"]["slowest"][0]["host"] == "site0.test"
    progress = monitor.measure(SOURCE, "records", RUN)
    assert progress.hosts == report["hosts"]
    assert "hosts 8/8 done (0 paused)" in progress.line()


def test_one_host_gives_no_host_section(redis_client, mongo_server, mongo_database) -> None:
    url = "http://only.test/a"
    record_fetches(redis_client, SOURCE, [TaskMessage(source=SOURCE, url=url, run_id=RUN, enqueued_at=1.0)],
                   [fetched(url, 0.2)])
    database = mongo_server.client()[mongo_database]
    assert "hosts" not in RunMonitor(database, database, redis_client).report_figures(SOURCE, "records", RUN)
    assert RunHosts(redis_client).read(SOURCE, RUN).hosts == 1
