"""Browser sources on JavaScript pages, end to end: real Redis, the distributor, a Celery slot host on
`pageslots`, real Chromium through a counting SG forward proxy, the demo site's JavaScript shapes
(harvester_demo.browser_shapes) and MongoDB.

- pages whose content comes 50-500 ms after ``load`` (a timer, the page's own XHR) are complete with the default
  readiness rule (every required attribute) and with each ``wait_for`` kind;
- a page whose required content never comes is rendered again by the failure rules, then rejected naming the
  attribute and the wait, with a snapshot the dead letter links to;
- actions: an infinite-scroll and a "load more" listing harvested whole, and only as far as their bounds; a
  consent overlay dismissed;
- a cookie set during one source's visit is absent in the next source's; what a page tries on its own (a popup,
  a WebSocket, ``*.localhost``, a redirecting image, a service worker) never reaches a refused address;
- the requests a page makes to its own site take per_minute and per-host tokens, and the run report counts them.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from harvester.config.model import SourceConfig
from harvester.distributor import Intake, RateLimitStore, TaskMessage
from harvester.pageslots.manager import PageSlotManager
from harvester.pageslots.registry import SlotHosts
from harvester.redis_keys import SourceKeys
from harvester.settings import HarvesterSettings
from harvester_demo.app import product_facts

from tests.fixtures.demo_site import demo_source_document
from tests.fixtures.servers import VENV_BIN
from tests.pageslots.test_slot_hosting import BLOCKED_TYPES, wait_for, write_source

pytestmark = [pytest.mark.integration, pytest.mark.slow]
REQUIRED = {"title": {"css": "h1.title::text", "required": True}, "sku": {"css": "span.sku::text", "required": True},
            "price": {"css": "span.price::text", "type": "float", "required": True}}
OPTIONAL = {name: {**attribute, "required": False} for name, attribute in REQUIRED.items()}


def shape_source(base_url: str, name: str, **overrides: Any) -> dict[str, Any]:
    """An SG browser source of detail pages with the demo's product attributes (tests override fields)."""
    document = demo_source_document(base_url, name)
    document.pop("listing")
    document.update({"render": "browser", "country": "SG", "input": {"kind": "details", "seeds": [f"{base_url}/"]},
                     "attributes": REQUIRED, "output": {"key": ["url"]}, "blocked_resource_types": BLOCKED_TYPES,
                     "rate_limit": {"max_active": 20, "per_minute": 100_000}, "retries": 0, "timeout": 10})
    document.update(overrides)
    return document


class Slots:
    """The slot host, the page_slots jobs and what landed: one test's harness."""

    def __init__(self, settings: HarvesterSettings, redis_client, mongo_server, demo_site) -> None:
        self.settings, self.redis, self.demo_site = settings, redis_client, demo_site
        self.manager = PageSlotManager(redis_client, settings)
        self.intake = Intake(redis_client, settings)
        self.store = RateLimitStore(redis_client, settings)
        self.database = mongo_server.client()[settings.mongo_database]

    def source(self, name: str, **overrides: Any) -> SourceConfig:
        return write_source(self.settings, shape_source(self.demo_site.url, name, **overrides))

    def push(self, source: SourceConfig, paths: list[str], kind: str = "details") -> list[str]:
        messages = [TaskMessage(task_id=f"{source.name}-{index}", source=source.name, kind=kind,
                                url=self.demo_site.url + path, country="SG") for index, path in enumerate(paths)]
        self.intake.push(source, messages)
        return [message.task_id for message in messages]

    def run_jobs(self) -> None:  # what the page_slots DAG does every minute
        self.manager.allocate()
        self.manager.prepare()

    def records(self, source: SourceConfig) -> list[dict[str, Any]]:
        return list(self.database[source.output_collection].find({}, {"_id": 0}))

    def dead(self, source: SourceConfig) -> list[dict[str, Any]]:
        return [json.loads(raw) for raw in self.redis.lrange(SourceKeys(source.name).dead_letters, 0, -1)]

    def settled(self, source: SourceConfig) -> int:
        return len(self.records(source)) + len(self.dead(source))

    def wait_settled(self, sources: list[tuple[SourceConfig, int]], timeout: float = 120) -> None:
        wait_for(lambda: all(self.settled(source) >= count for source, count in sources), timeout,
                 lambda: "; ".join(f"{source.name}: {len(self.records(source))} stored, {self.dead(source)[:2]} dead"
                                   f" of {count}" for source, count in sources), between=self.run_jobs)


@pytest.fixture
def shape_settings(configure_settings: Callable[..., HarvesterSettings], demo_site) -> HarvesterSettings:
    # only the demo site's port of loopback may be browsed: the secret server's port is refused
    return configure_settings(retry_base_seconds=0.2, retry_max_seconds=1, heartbeat_seconds=1, lease_seconds=20,
                              reap_interval_seconds=1, page_slot_retry_delay_seconds=0.05,
                              page_slot_heartbeat_seconds=1, page_slot_task_wait_seconds=0.3,
                              page_slot_idle_seconds=30, max_page_slots=4,
                              allowed_private_networks=f"127.0.0.1/32:{demo_site.port}")


@pytest.fixture
def slots_factory(shape_settings, forward_proxy_factory, monkeypatch, demo_site, mongo_server, redis_client,
                  celery_worker_factory, start_distributor) -> Callable[[int], Slots]:
    def start(concurrency: int) -> Slots:
        monkeypatch.setenv("AIRFLOW_CONN_PROXY_SG", forward_proxy_factory("SG").url)
        start_distributor()
        celery_worker_factory(queues="pageslots", concurrency=concurrency, name=f"shapes{concurrency}")
        wait_for(lambda: SlotHosts(redis_client).live_capacity().slots == concurrency, 30, lambda: "no capacity")
        return Slots(shape_settings, redis_client, mongo_server, demo_site)

    return start


def assert_complete(slots: Slots, source: SourceConfig, numbers: list[int]) -> None:
    records = {record["sku"]: record for record in slots.records(source)}
    assert slots.dead(source) == [], source.name
    for number in numbers:
        facts = product_facts(number)
        record = records[facts["sku"]]
        assert (record["title"], record["price"]) == (facts["title"], facts["price"]), (source.name, number)


def test_late_pages_are_complete_with_the_default_rule_and_with_each_wait_for(slots_factory) -> None:
    slots = slots_factory(2)
    cases = {  # name: (browser section, attributes, product numbers, page kind)
        "late_default": ({}, REQUIRED, list(range(1, 13)), None),
        "late_css": ({"wait_for": {"css": "span.price", "state": "visible"}}, OPTIONAL, [13, 14, 15, 16], "timer"),
        "late_xpath": ({"wait_for": {"xpath": "//span[contains(@class, 'price')]", "state": "attached"}}, OPTIONAL,
                       [17, 18, 19, 20], "xhr"),
        "late_idle": ({"wait_for": "network_idle"}, OPTIONAL, [21, 22, 23, 24], "xhr"),
        "late_delay": ({"wait_for": {"delay_ms": 700}}, OPTIONAL, [25, 26, 27, 28], "timer"),
    }
    sources = []
    for name, (browser, attributes, numbers, kind) in cases.items():
        source = slots.source(name, attributes=attributes, **({"browser": browser} if browser else {}))
        paths = [f"/late/{kind or ('timer' if number % 2 else 'xhr')}/{number}" for number in numbers]
        slots.push(source, paths)
        sources.append((source, len(numbers)))
    slots.wait_settled(sources)
    for source, count in sources:
        assert len(slots.records(source)) == count, source.name
        assert_complete(slots, source, cases[source.name][2])


def test_a_page_never_ready_is_rendered_again_then_rejected_naming_the_attribute_and_the_wait(
        slots_factory, shape_settings, tmp_path: Path) -> None:
    from harvester.storage.snapshots import SnapshotStore

    slots = slots_factory(1)
    source = slots.source("never_ready", browser={"wait_timeout": 1})
    [task_id] = slots.push(source, ["/late/timer/30?never=1"])
    slots.wait_settled([(source, 1)], timeout=90)
    [letter] = slots.dead(source)
    reason = letter["reason"]
    assert reason.startswith("record rejected") and "price" in reason, reason
    assert "not ready" in reason and "span.price" in reason and "1s" in reason, reason
    counters = slots.store.counters(source.name)
    assert counters["outcome:browser_failed_loads"] == shape_settings.page_slot_give_up_after_failures  # renders
    assert counters["outcome:browser_gave_up"] == 1

    snapshot = SnapshotStore.from_settings(shape_settings).get(source.name, task_id)
    assert snapshot is not None and product_facts(30)["title"] in snapshot.html
    assert snapshot.screenshot is not None and snapshot.screenshot[:2] == b"\xff\xd8"  # a JPEG
    assert len(snapshot.html.encode()) + len(snapshot.screenshot) <= shape_settings.browser_snapshot_max_bytes

    shown = subprocess.run([str(VENV_BIN / "harvester"), "dead-letters", "show", "--source", source.name,
                            "--task", task_id, "--out", str(tmp_path)], capture_output=True, text=True,
                           env=dict(os.environ), timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert "not ready" in shown.stdout and "snapshot" in shown.stdout
    assert (tmp_path / f"{task_id}.html").read_text() == snapshot.html
    assert (tmp_path / f"{task_id}.jpg").read_bytes() == snapshot.screenshot


def test_actions_harvest_whole_listings_stop_at_their_bounds_and_dismiss_an_overlay(slots_factory) -> None:
    slots = slots_factory(2)
    listing = {"link_selectors": ["a.product-link"], "follow": r"/product/\d+$", "max_depth": 1}
    scroll, more = "/scroll/listing?items=35&batch=10", "/load-more/listing?items=35&batch=10"
    cases = {  # name: (listing page, actions, products expected)
        "scroll_all": (scroll, [{"scroll": {"max": 10, "on": "listing"}}], 35),
        "scroll_two": (scroll, [{"scroll": {"max": 2, "on": "listing"}}], 30),  # 10 shown + 2 scrolls of 10
        "more_all": (more, [{"click": {"selector": "button.load-more", "max": 10, "on": "listing"}}], 35),
        "more_one": (more, [{"click": {"selector": "button.load-more", "max": 1, "on": "listing"}}], 20),
    }
    sources = []
    for name, (page, actions, expected) in cases.items():
        source = slots.source(name, listing=listing, input={"kind": "listing", "seeds": [slots.demo_site.url + page]},
                              browser={"actions": actions})
        slots.push(source, [page], kind="listing")
        sources.append((source, expected))
    consent = slots.source("consent", browser={"actions": [{"dismiss": "button.consent-accept"}]})
    slots.push(consent, [f"/consent/product/{number}" for number in (40, 41, 42, 43)])
    wait_for(lambda: all(len(slots.records(source)) >= count for source, count in sources)
             and slots.settled(consent) >= 4, 180,
             lambda: "; ".join(f"{source.name}: {len(slots.records(source))}" for source, _ in sources), slots.run_jobs)
    for source, count in sources:
        numbers = sorted(int(record["url"].rsplit("/", 1)[1]) for record in slots.records(source))
        assert numbers == list(range(1, count + 1)), source.name
    assert_complete(slots, consent, [40, 41, 42, 43])


def guard_paths(secret) -> list[str]:
    redirect = quote(f"/hostile/redirect?to={secret.url}/image", safe="")
    return [f"/guard/popup?to={quote(secret.url + '/popup', safe='')}",
            f"/guard/websocket?to={quote(f'ws://{secret.address}/socket', safe='')}",
            f"/guard/fetch?to={quote(f'http://secret.localhost:{secret.port}/', safe='')}",
            f"/guard/image?to={redirect}",
            f"/guard/service-worker?to={quote(secret.url + '/worker', safe='')}"]


def test_a_cookie_stays_in_its_source_visit_and_no_page_reaches_a_refused_address(slots_factory,
                                                                                  secret_server) -> None:
    slots = slots_factory(1)  # one slot: both sources' pages load in the same browser, one after the other
    first = slots.source("cookie_a", attributes={"sku": {"css": "span.sku", "required": True},
                                                  "visitor": {"css": "span.visitor"}})
    slots.push(first, ["/cookie/set?value=A"])
    slots.wait_settled([(first, 1)])
    second = slots.source("cookie_b", attributes={"sku": {"css": "span.sku", "required": True},
                                                   "sent": {"css": "span.cookie-header"},
                                                   "held": {"css": "span.cookie-js", "required": True}})
    slots.push(second, ["/cookie/show"])
    slots.wait_settled([(second, 1)])
    assert [record["visitor"] for record in slots.records(first)] == ["A"]
    assert [(record["sent"], record["held"]) for record in slots.records(second)] == [("none", "none")]

    settled = {"sku": REQUIRED["sku"], "probe": {"css": "span.probe.settled", "required": True}}  # after the attack
    guarded = slots.source("guarded", blocked_resource_types=[], attributes=settled)
    sockets = slots.source("guarded_sockets", blocked_resource_types=[], attributes=settled,
                           browser={"websockets": "allow"})  # allowed, and then checked like any connection
    paths = guard_paths(secret_server)
    slots.push(guarded, paths)
    slots.push(sockets, [paths[1]])
    slots.wait_settled([(guarded, len(paths)), (sockets, 1)])
    assert len(slots.records(guarded)) == len(paths) and len(slots.records(sockets)) == 1
    assert secret_server.lines == []


def test_a_page_s_own_requests_take_rate_tokens_and_the_run_report_counts_them(
        slots_factory, configure_settings, demo_site) -> None:
    from harvester.producer.planner import Planner, PlanOptions
    from harvester.producer.producer import Producer
    from harvester.producer.progress import RunSettlement

    window = 4.0
    settings = configure_settings(rate_window_seconds=window, rate_window_margin_seconds=0.5)
    slots = slots_factory(2)
    pages = [f"{demo_site.url}/late/xhr/{number}?delay_ms=50" for number in (51, 52, 53, 54)]
    source = slots.source("rated", input={"kind": "details", "seeds": pages},
                          rate_limit={"max_active": 4, "per_minute": 4, "per_host_per_minute": 3})
    Planner(slots.database, slots.database, slots.database).plan(source, "run1", PlanOptions.for_source(source))
    Producer.from_settings(slots.settings, slots.database, slots.redis).produce(source, "run1")
    slots.wait_settled([(source, 4)], timeout=120)
    assert_complete(slots, source, [51, 52, 53, 54])

    seen = demo_site.requests_of("rated")
    assert sum(seen["paths"].values()) == 8  # four pages, each with its one XHR (its photo and styles blocked)
    assert int(slots.redis.hget(SourceKeys(source.name).counters, "fetch_starts")) == 8  # a token each
    starts = sorted(seen["starts"])
    busiest = max(sum(1 for other in starts if start <= other < start + window) for start in starts)
    assert busiest <= 3  # per_host_per_minute, as the site saw it (per_minute 4 would allow 4)

    report = RunSettlement(slots.database, slots.database, slots.redis).report(source.name,
                                                                                source.output_collection, "run1")
    assert report["browser_requests"] == {"pages": 4, "sub_requests": 4}
    assert settings.rate_window_seconds == window


def test_a_browser_source_archives_each_page_s_document_and_the_json_its_data_came_from(
        slots_factory, demo_site, tmp_path: Path) -> None:
    """For browser sources too, the main document and the JSON responses its data came from are WARC
    records (by their own URLs in the index, the JSON never re-extracted as a page), and the files pass
    ``warcio check``."""
    from harvester.storage import ArchiveIndex, read_archived

    slots = slots_factory(2)
    location = tmp_path / "warc"
    source = slots.source("archived_browser", output={"key": ["url"], "archive": {
        "enabled": True, "location": f"file://{location}"}})
    numbers = [61, 62, 63]
    slots.push(source, [f"/late/xhr/{number}?delay_ms=50" for number in numbers])
    slots.wait_settled([(source, len(numbers))])
    assert_complete(slots, source, numbers)

    index, deadline = ArchiveIndex(slots.database), time.monotonic() + 20
    rows = list(index.rows(source.name))
    while len(rows) < 2 * len(numbers) and time.monotonic() < deadline:  # the slots' rows are written behind
        time.sleep(0.2)  # (archive_index_flush_seconds): each slot's timer flushes them
        rows = list(index.rows(source.name))
    documents = {row["url"]: row for row in rows if row["kind"] == "details"}
    data = {row["url"]: row for row in rows if row["kind"] == "data"}
    assert set(documents) == {f"{demo_site.url}/late/xhr/{number}?delay_ms=50" for number in numbers}
    assert len(data) == len(numbers) and all("/late/api/product/" in url for url in data)
    for url, row in data.items():
        archived = read_archived(row)
        assert archived is not None and archived.status == 200 and "json" in archived.content_type
        number = int(url.split("/late/api/product/", 1)[1].split("?", 1)[0])
        assert json.loads(archived.body)["id"] == number  # the product's data as the page's XHR received it
        assert product_facts(number)["sku"] in json.loads(archived.body)["html"]
    for row in documents.values():
        archived = read_archived(row)
        assert archived is not None and archived.status == 200 and b"<html" in archived.body.lower()
    files = sorted(location.rglob("*.warc.gz"))
    assert files
    for path in files:
        checked = subprocess.run([str(VENV_BIN / "warcio"), "check", str(path)], capture_output=True, text=True)
        assert checked.returncode == 0, checked.stdout + checked.stderr
