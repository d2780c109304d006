"""Items that go away and come back, and a fixed config that reaches every page, end to end against real
Redis, MongoDB and the demo site: runs planned and produced as the DAG does, their tasks admitted and run
through the worker's batch pipeline, the report read as the ``report`` task writes it (the ``Harvest`` of
the incremental tests).

- 10 % of the items delisted by each way (410, 404, a soft 404, a redirect to the home page, a redirect to
  the listing): exactly those carry ``gone_at`` and keep their values, the run stays green with 0 dead
  letters; relisted, ``gone_at`` is cleared and the report counts them back;
- a redirect that stays on the item stores one record, under the final URL, and remembers the requested one;
- a selector fixed between two runs reaches pages that would otherwise answer 304;
- a manual trigger's ``detail_urls`` harvests items of a listing source again now, in full.
"""

from __future__ import annotations

from typing import Any

import pytest
from harvester.config.model import SourceConfig
from harvester.producer.planner import PlanOptions

from tests.workers.test_incremental import Harvest, post, site_stats

pytestmark = [pytest.mark.integration]

ITEMS = 50
WAYS = ("410", "404", "soft", "home", "listing")


@pytest.fixture
def harvest(worker_settings, mongo_server, redis_client, crawl) -> Harvest:
    return Harvest(worker_settings, mongo_server, redis_client, crawl)


@pytest.fixture
def inc_site(demo_site):
    post(f"{demo_site.url}/_inc/reset")
    yield demo_site
    post(f"{demo_site.url}/_inc/reset")


@pytest.fixture
def life_site(demo_site):
    post(f"{demo_site.url}/_life/reset")
    yield demo_site
    post(f"{demo_site.url}/_life/reset")


def item_url(site, product_id: int) -> str:
    return f"{site.url}/life/shop/item/{product_id}"


def life_source(write_source, site, name: str, **overrides: Any) -> SourceConfig:
    document: dict[str, Any] = {
        "input": {"kind": "details", "seeds": [item_url(site, number) for number in range(1, ITEMS + 1)]},
        "listing": None, "harvesting_lag": 0, "gone": {"texts": ["Product not found"]}, **overrides}
    return write_source(name, **document)


def dead_letters(report: dict[str, Any]) -> int:
    return int(report["tasks_failed"])


def test_delisted_items_carry_gone_at_keep_their_values_and_the_run_stays_green(
        write_source, life_site, harvest: Harvest) -> None:
    source = life_source(write_source, life_site, "life_delisted")
    first = harvest.run(source, "run-1")
    assert first["records_new"] == ITEMS and first["quality"]["outcome"] == "green"
    before = harvest.records(source)

    delisted: dict[int, str] = {}
    for index, way in enumerate(WAYS):  # 10 % of the items each way: ids 1-5 by 410, 6-10 by 404, ...
        for product_id in range(index * 5 + 1, index * 5 + 6):
            post(f"{life_site.url}/_life/delist?product={product_id}&how={way}")
            delisted[product_id] = way
    second = harvest.run(source, "run-2")
    records = harvest.records(source)
    assert len(records) == ITEMS  # a redirect never stores the home page or the listing as an item
    gone = {url for url, record in records.items() if record.get("gone_at") is not None}
    assert gone == {item_url(life_site, product_id) for product_id in delisted}
    for product_id, way in delisted.items():
        record = records[item_url(life_site, product_id)]
        assert record["title"] == before[item_url(life_site, product_id)]["title"]  # the last values are kept
        assert record["price"] == before[item_url(life_site, product_id)]["price"]
        expected = {"410": "HTTP 410", "404": "HTTP 404", "soft": "Product not found", "home": "home page",
                    "listing": "redirected up to"}[way]
        assert expected in record["gone_reason"], (way, record["gone_reason"])
    assert dead_letters(second) == 0, second["failures_by_reason"]
    assert second["quality"]["outcome"] == "green", second["quality"]
    assert second["records_gone"] == len(delisted) and second["records_back"] == 0

    third = harvest.run(source, "run-3")  # still gone: gone since the first time, not counted again
    still = harvest.records(source)
    assert all(still[url]["gone_at"] == records[url]["gone_at"] for url in gone)
    assert third["records_gone"] == 0 and dead_letters(third) == 0

    post(f"{life_site.url}/_life/reset")  # every item listed again
    fourth = harvest.run(source, "run-4")
    back = harvest.records(source)
    assert not [url for url, record in back.items() if "gone_at" in record or "gone_reason" in record]
    assert fourth["records_back"] == len(delisted) and fourth["quality"]["outcome"] == "green"


def test_a_redirect_that_stays_on_the_item_stores_one_record_under_the_final_url(
        write_source, life_site, harvest: Harvest) -> None:
    old = f"{life_site.url}/life/old/item/7"
    source = life_source(write_source, life_site, "life_moved",
                         input={"kind": "details", "seeds": [old, item_url(life_site, 8)]})
    harvest.run(source, "run-1")
    records = harvest.records(source)
    assert set(records) == {item_url(life_site, 7), item_url(life_site, 8)}
    assert records[item_url(life_site, 7)]["requested_urls"] == [old]
    assert "requested_urls" not in records[item_url(life_site, 8)]
    again = life_source(write_source, life_site, "life_moved",
                        input={"kind": "details", "seeds": [old, item_url(life_site, 7)]})
    harvest.run(again, "run-2")  # the old and the new address of one item: still one record
    records = harvest.records(again)
    assert len(records) == 2 and records[item_url(life_site, 7)]["requested_urls"] == [old]


def test_a_fixed_selector_reaches_pages_that_would_answer_304(write_source, inc_site, harvest: Harvest) -> None:
    seeds = [f"{inc_site.url}/inc/all/product/{number}" for number in range(1, 21)]  # every page honours validators
    broken = write_source("life_version", input={"kind": "details", "seeds": seeds}, listing=None, harvesting_lag=0,
                          attributes={"sku": {"css": ".sku", "required": True}, "price": {"css": ".stock"}})
    harvest.run(broken, "run-1")
    first = harvest.records(broken)
    assert all(record["config_version"] for record in first.values())
    unchanged = harvest.run(broken, "run-2")  # same config: validators sent, every page answers 304
    assert unchanged["records_not_modified"] == 20
    fixed = write_source("life_version", input={"kind": "details", "seeds": seeds}, listing=None, harvesting_lag=0,
                         attributes={"sku": {"css": ".sku", "required": True}, "price": {"css": ".price"}})
    before = site_stats(inc_site, fixed.name)["statuses"]
    third = harvest.run(fixed, "run-3")
    after = site_stats(inc_site, fixed.name)["statuses"]
    assert third["records_not_modified"] == 0
    assert after.get("304", 0) == before.get("304", 0) and after["200"] - before["200"] == 20  # all in full
    records = harvest.records(fixed)
    assert all(record["price"].startswith("€") for record in records.values())
    versions = {record["config_version"] for record in records.values()}
    assert len(versions) == 1 and versions != {record["config_version"] for record in first.values()}
    fourth = harvest.run(fixed, "run-4")  # the new version is current now: conditional again
    assert fourth["records_not_modified"] == 20


def test_a_manual_trigger_fetches_its_urls_in_full_and_detail_urls_work_on_a_listing_source(
        write_source, inc_site, harvest: Harvest) -> None:
    seeds = [f"{inc_site.url}/inc/all/product/{number}" for number in range(1, 6)]  # every page honours validators
    details = write_source("life_again", input={"kind": "details", "seeds": seeds}, listing=None, harvesting_lag=0)
    harvest.run(details, "run-1")
    scheduled = harvest.run(details, "run-2")  # the same config: conditional, every page answers 304
    before = site_stats(inc_site, details.name)["statuses"]
    manual = harvest.run(details, "run-3", options=PlanOptions.for_source(details, {"urls": seeds[:3]}))
    after = site_stats(inc_site, details.name)["statuses"]
    assert scheduled["records_not_modified"] == 5 and manual["records_not_modified"] == 0
    assert manual["urls_planned"] == 3 and after.get("304", 0) == before.get("304", 0)  # in full, despite the
    assert after["200"] - before["200"] == 3  # validators of the current config version

    listing = write_source("life_again_listing", input={"kind": "listing", "seeds": [f"{inc_site.url}/shop"]},
                           harvesting_lag="1d")
    options = PlanOptions.for_source(listing, {"detail_urls": seeds[:3]})
    assert options.kind == "details" and options.urls == seeds[:3]
    first = harvest.run(listing, "run-1", options=options)
    assert first["records_new"] == 3 and first["urls_planned"] == 3  # detail pages, not listing pages
    before = site_stats(inc_site, listing.name)["statuses"]
    again = harvest.run(listing, "run-2", options=PlanOptions.for_source(listing, {"detail_urls": seeds[:3]}))
    after = site_stats(inc_site, listing.name)["statuses"]
    assert again["records_not_modified"] == 0 and after.get("304", 0) == before.get("304", 0)
    assert after["200"] - before["200"] == 3


def test_a_page_gone_before_its_item_was_ever_stored_is_a_dead_letter_naming_why(
        write_source, life_site, crawl, redis_client) -> None:
    from harvester.distributor import DeadLetters, TaskMessage

    source = life_source(write_source, life_site, "life_unstored")
    post(f"{life_site.url}/_life/delist?product=3&how=soft")
    post(f"{life_site.url}/_life/delist?product=4&how=410")
    crawl.push(source, *[TaskMessage(source=source.name, url=item_url(life_site, number)) for number in (3, 4)])
    while crawl.step(source) is not None:
        pass
    reasons = sorted(entry.reason for entry in DeadLetters(redis_client).list(source.name))
    assert reasons[0].startswith("gone: the page says 'Product not found'") and "no record" in reasons[0]
    assert reasons[1].startswith("http_410")
    assert crawl.store.counters(source.name)["outcome:gone_unstored"] == 2


def test_a_reextraction_reads_gone_pages_as_a_harvest_does(write_source, life_site, harvest: Harvest, tmp_path,
                                                            worker_settings) -> None:
    """The archive keeps the 410, the 404, the soft 404 and the redirects away of delisted items as their latest
    pages: a re-extraction over them leaves each record gone with its last values (read as a page, the 410's
    "This page does not exist" was stored as the item's title and its ``gone_at`` cleared)."""
    from datetime import timedelta

    from harvester.producer.reextraction import Reextraction

    archive = {"enabled": True, "location": f"file://{tmp_path / 'archive'}"}
    source = life_source(write_source, life_site, "life_reread", output={"key": ["url"], "archive": archive})
    harvest.run(source, "run-1")
    before = harvest.records(source)
    delisted = {index * 2 + offset: way for index, way in enumerate(WAYS) for offset in (1, 2)}  # ids 1-10
    for product_id, way in delisted.items():
        post(f"{life_site.url}/_life/delist?product={product_id}&how={way}")
    harvest.run(source, "run-2")
    assert harvest.crawl.runner.archive.flush()  # the index rows the writer's timer would flush within seconds
    gone = harvest.records(source)
    requests_before = life_site.client_stats(source.name)["total"]
    report = Reextraction.from_settings(worker_settings).run(source, since=timedelta(hours=1))
    assert life_site.client_stats(source.name)["total"] == requests_before
    after = harvest.records(source)
    for product_id in delisted:
        url = item_url(life_site, product_id)
        assert after[url].get("gone_at") == gone[url]["gone_at"] is not None, (delisted[product_id], after[url])
        assert after[url]["title"] == before[url]["title"] and after[url]["price"] == before[url]["price"]
    assert report["gone"] == len(delisted) and report["records_gone"] == 0  # gone already: not counted again
    assert report["records_unchanged"] == ITEMS - len(delisted) and report.get("records_changed", 0) == 0
    assert report["quality"]["outcome"] == "green", report["quality"]
