"""The hostile pages through real workers — the distributor process, a Celery
worker, real Redis, the MongoDB stand-in and the demo site. Each hostile page ends dead-lettered with
its reason (never retried, no worker crash, no memory blow-up), the good and authenticated pages are
stored, a listing's links to refused addresses and disallowed paths are dropped and counted, and the
polite User-Agent's robots.txt Crawl-delay spaces its request starts."""

from __future__ import annotations

import itertools
import json
import time

import pytest
from harvester.distributor import DeadLetters, Intake, RateLimitStore, TaskMessage
from harvester_demo.hostile import BASIC_AUTH_PASSWORD, BASIC_AUTH_USER, POLITE_AGENT

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def wait_idle(store: RateLimitStore, source: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        stats = store.stats([source])[source]
        if stats.pending == 0 and stats.active == 0 and stats.delayed == 0:
            return
        time.sleep(0.3)
    pytest.fail(f"{source} not idle after {timeout}s: {store.stats([source])}")


def test_hostile_pages_through_real_workers(write_source, worker_settings, demo_site, mongo_server, redis_client,
                                            celery_worker_factory, start_distributor, monkeypatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_DEMO_LOGIN", json.dumps(
        {"conn_type": "http", "login": BASIC_AUTH_USER, "password": BASIC_AUTH_PASSWORD}))
    source = write_source("e2e_hostile", retries=2, timeout=20, http_connection_id="demo_login",
                          max_retry_after=2,
                          listing={"link_selectors": ["a.l"], "follow": ".*", "max_depth": 0})
    start_distributor()
    worker = celery_worker_factory(queues="default", concurrency=1)
    site = demo_site.url
    hostile = {
        "bomb": ("/hostile/gzip-bomb?mb=2048&layers=2", "more than one content encoding"),
        "corrupt": ("/hostile/corrupt-gzip", "corrupt"),
        "metadata": ("/hostile/redirect?to=http://169.254.169.254/latest/meta-data/", "link-local"),
        "loopback": (f"/hostile/redirect?to=http://127.0.0.2:{demo_site.port}/product/1", "loopback"),
        "file": ("/hostile/redirect?to=file:///etc/passwd", "scheme refused"),
        "robots": ("/private/4", "robots.txt"),
    }
    messages = [TaskMessage(task_id=name, source=source.name, kind="details", url=f"{site}{path}")
                for name, (path, _) in hostile.items()]
    messages += [TaskMessage(task_id="members", source=source.name, kind="details", url=f"{site}/auth/basic/5"),
                 TaskMessage(task_id="charset", source=source.name, kind="details", url=f"{site}/hostile/meta-charset"),
                 TaskMessage(task_id="links", source=source.name, kind="listing", url=f"{site}/hostile/private-links"),
                 TaskMessage(task_id="huge", source=source.name, kind="details",
                             url=f"{site}/hostile/retry-after?value=huge")]
    Intake(redis_client, worker_settings).push(source, messages)
    store = RateLimitStore(redis_client, worker_settings)
    wait_idle(store, source.name, 240)

    letters = {letter.message["task_id"]: letter.reason for letter in DeadLetters(redis_client).list(source.name)}
    for name, (_, reason) in hostile.items():
        assert reason in letters.get(name, ""), (name, letters)
    assert "http_429" in letters["huge"]  # a 400-digit Retry-After: retried with the default wait, then dead
    records = {record["url"]: record for record in
               mongo_server.client()[worker_settings.mongo_database][source.output_collection].find()}
    assert records[f"{site}/auth/basic/5"]["sku"] == "SKU-00005"
    assert records[f"{site}/hostile/meta-charset"]["title"] == "Caf\u00e9 cr\u00e8me \u201cspecial\u201d"
    assert records[f"{site}/product/1"]["sku"] == "SKU-00001"  # the one allowed link of the listing
    assert records[f"{site}/product/5"]["sku"] == "SKU-00005"  # its link's user:secret@ dropped, never sent
    assert len(records) == 4 and not any("secret" in url for url in records)
    counters = store.counters(source.name)
    assert counters["outcome:links_ignored:address_refused"] == 6
    assert counters["outcome:links_ignored:robots_disallowed"] == 1
    assert counters["outcome:refused"] >= 3 and counters["outcome:decode_error"] >= 2
    assert demo_site.client_stats(source.name)["robots"] == 1
    assert worker.alive()


def test_crawl_delay_of_robots_txt_spaces_request_starts_across_a_worker(
        write_source, worker_settings, demo_site, redis_client, celery_worker_factory, start_distributor) -> None:
    source = write_source("e2e_polite", headers={"X-Demo-Client": "e2e_polite", "User-Agent": f"{POLITE_AGENT}/1.0"},
                          input={"seeds": [f"{demo_site.url}/product/1"], "kind": "details"}, listing=None,
                          rate_limit={"max_active": 4, "per_minute": 100_000})
    start_distributor()
    celery_worker_factory(queues="default", concurrency=2)
    Intake(redis_client, worker_settings).push(source, [
        TaskMessage(task_id=f"p{n}", source=source.name, kind="details", url=f"{demo_site.url}/product/{n}")
        for n in range(1, 5)])
    wait_idle(RateLimitStore(redis_client, worker_settings), source.name, 120)
    starts = sorted(demo_site.client_stats(source.name)["request_times"])
    assert len(starts) == 4
    gaps = [later - earlier for earlier, later in itertools.pairwise(starts)]
    assert min(gaps) >= 0.9, gaps  # Crawl-delay: 1 (Request-rate 2/1s is faster), held at fetch time
