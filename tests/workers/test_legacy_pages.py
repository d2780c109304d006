"""Pages as older real sites write them, through the worker's whole path (fetch, extract, follow, store on
real Redis and MongoDB): listing links with a fresh session id on every render are one record per item, and
item pages in windows-1252 or Shift_JIS that name no charset are stored in the right text."""

from __future__ import annotations

import pytest
from harvester.distributor import TaskMessage
from harvester_demo.legacy import LEGACY_ITEMS, LEGACY_PAGES, legacy_facts

pytestmark = pytest.mark.integration


def legacy_source(write_source, name: str, **overrides):
    document = {"input": {"seeds": ["http://127.0.0.1:9/legacy/shop"], "kind": "listing"},
                "listing": {"link_selectors": ["a.item-link::attr(href)"],
                            "next_page_selectors": ["a.next::attr(href)"],
                            "follow": r"^http://127\.0\.0\.1:\d+/legacy/item/\d+$", "max_depth": LEGACY_PAGES},
                "attributes": {"sku": {"css": ".sku", "required": True}, "name": {"css": "h1.name"},
                               "description": {"css": ".description"}}}
    return write_source(name, **{**document, **overrides})


def run_until_idle(crawl, source, steps: int = 60) -> None:
    for _ in range(steps):
        if crawl.step(source) is None:
            return
    pytest.fail("the crawl did not end")


def test_an_item_linked_from_two_renders_with_two_sessions_is_one_record(write_source, crawl, demo_site,
                                                                         mongo_server, worker_settings) -> None:
    """Neighbouring listing pages share three items, each link with its own jsessionid and PHPSESSID: the
    session ids left the key in the URL, so each item is fetched once and stored once."""
    source = legacy_source(write_source, "legacy_sessions")
    crawl.push(source, TaskMessage(source=source.name, kind="listing", url=f"{demo_site.url}/legacy/shop?page=1"))
    run_until_idle(crawl, source)
    collection = mongo_server.client()[worker_settings.mongo_database][source.output_collection]
    urls = sorted(document["url"] for document in collection.find({}, {"url": 1}))
    assert urls == sorted(f"{demo_site.url}/legacy/item/{item_id}" for item_id in range(1, LEGACY_ITEMS + 1))


def test_a_kept_session_name_stays_in_the_key(write_source, crawl, demo_site, mongo_server,
                                             worker_settings) -> None:
    """A source whose site needs PHPSESSID keeps it: then each render's link is an item of its own."""
    source = legacy_source(write_source, "legacy_kept", session_ids={"keep": ["PHPSESSID"]},
                           listing={"link_selectors": ["a.item-link::attr(href)"], "max_depth": 0,
                                    "follow": r"^http://127\.0\.0\.1:\d+/legacy/item/\d+\?PHPSESSID=\w+$"})
    crawl.push(source, TaskMessage(source=source.name, kind="listing", url=f"{demo_site.url}/legacy/shop?page=1"))
    run_until_idle(crawl, source)
    collection = mongo_server.client()[worker_settings.mongo_database][source.output_collection]
    urls = [document["url"] for document in collection.find({}, {"url": 1})]
    assert len(urls) == 6 and all("PHPSESSID=" in url and "jsessionid" not in url for url in urls)


def test_pages_naming_no_charset_are_stored_in_their_text(write_source, crawl, demo_site, mongo_server,
                                                          worker_settings) -> None:
    """windows-1252 and Shift_JIS with no charset anywhere: decoded as UTF-8 they were U+FFFD mojibake."""
    source = legacy_source(write_source, "legacy_charsets")
    item_ids = range(1, 9)
    crawl.push(source, *[TaskMessage(source=source.name, url=f"{demo_site.url}/legacy/item/{item_id}")
                         for item_id in item_ids])
    run_until_idle(crawl, source)
    collection = mongo_server.client()[worker_settings.mongo_database][source.output_collection]
    stored = {document["sku"]: document for document in collection.find()}
    for item_id in item_ids:
        facts = legacy_facts(item_id)
        record = stored[facts["sku"]]
        assert (record["name"], record["description"]) == (facts["name"], facts["description"]), facts["charset"]
