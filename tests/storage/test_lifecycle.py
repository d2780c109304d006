"""A record's life cycle on a real MongoDB-wire server: gone and back, moved by a redirect, named by the config
version that extracted it, and filtered by ``gone`` in records and exports."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta

import pytest
from harvester.storage.data_handler import DataHandler
from harvester.storage.exports import ExportQuery, export_records
from harvester.storage.records import latest_records

from tests.fixtures.demo_site import demo_source

pytestmark = pytest.mark.integration

FIRST = datetime(2026, 3, 1, tzinfo=UTC)


@pytest.fixture
def handler(harvester_settings, mongo_server) -> DataHandler:
    return DataHandler(harvester_settings, mongo_server.client())


def shop(name: str, **overrides):
    return demo_source("http://shop", output={"key": ["url"], "collection": name, **overrides})


def test_gone_keeps_the_values_and_the_first_time_and_a_write_brings_it_back(handler) -> None:
    source = shop("life_gone")
    handler.write(source, [{"url": f"u{number}", "price": number} for number in range(3)], "run-1", now=FIRST)
    marks = handler.mark_gone(source, {"u0": "HTTP 410", "u1": "soft", "missing": "HTTP 404"}, now=FIRST)
    assert (marks.marked, marks.still_gone, marks.unknown) == (["u0", "u1"], [], ["missing"])
    later = FIRST + timedelta(days=2)
    again = handler.mark_gone(source, {"u0": "HTTP 404"}, now=later)
    assert again.still_gone == ["u0"] and not again.marked
    collection = handler.collection(source)
    record = collection.find_one({"url": "u0"})
    assert record["price"] == 0 and record["gone_at"].replace(tzinfo=UTC) == FIRST  # gone since the first time
    assert collection.count_documents({}) == 3  # nothing written for a URL with no record
    result = handler.write(source, [{"url": "u0", "price": 5}, {"url": "u2", "price": 2}], "run-3", now=later)
    assert result.back == 1
    back = collection.find_one({"url": "u0"})
    assert back["price"] == 5 and "gone_at" not in back and "gone_reason" not in back
    assert collection.find_one({"url": "u1"})["gone_reason"] == "soft"


def test_records_and_exports_filter_on_gone(handler) -> None:
    source = shop("life_filter")
    handler.write(source, [{"url": f"u{number}", "price": number} for number in range(4)], "run-1", now=FIRST)
    handler.mark_gone(source, {"u1": "HTTP 410", "u3": "HTTP 404"}, now=FIRST)
    collection = handler.collection(source)
    assert sorted(record["url"] for record in latest_records(collection, 10, gone=True)) == ["u1", "u3"]
    assert sorted(record["url"] for record in latest_records(collection, 10, gone=False)) == ["u0", "u2"]
    assert len(latest_records(collection, 10)) == 4
    out = io.BytesIO()
    assert export_records(source, collection, "jsonl", out, ExportQuery(gone=True)) == 2
    lines = [json.loads(line) for line in out.getvalue().decode().splitlines()]
    assert {line["url"]: line["gone_reason"] for line in lines} == {"u1": "HTTP 410", "u3": "HTTP 404"}
    csv_out = io.BytesIO()
    export_records(source, collection, "csv", csv_out, ExportQuery(gone=False))
    header, *rows = csv_out.getvalue().decode().splitlines()
    assert "gone_at" in header.split(",") and len(rows) == 2


def test_a_record_under_the_requested_url_moves_to_the_final_one(handler) -> None:
    source = shop("life_moves")
    handler.write(source, [{"url": "http://shop/old/7", "price": 7}, {"url": "http://shop/item/8", "price": 8},
                           {"url": "http://shop/item/9", "price": 9}], "run-1", now=FIRST)
    left = handler.settle_redirects(source, {"http://shop/old/7": "http://shop/item/7",
                                             "http://shop/item/9": "http://shop/item/8"})
    assert left == {"http://shop/item/9": "redirected to another item's page http://shop/item/8"}
    collection = handler.collection(source)
    moved = collection.find_one({"url": "http://shop/item/7"})
    assert moved["price"] == 7 and moved["requested_urls"] == ["http://shop/old/7"]
    assert collection.count_documents({"url": "http://shop/old/7"}) == 0
    handler.write(source, [{"url": "http://shop/item/7", "price": 70, "requested_urls": ["http://shop/old/7"]}],
                  "run-2")  # the alias is added once, however often the redirect is followed
    assert collection.find_one({"url": "http://shop/item/7"})["requested_urls"] == ["http://shop/old/7"]
    assert handler.settle_redirects(source, {"http://shop/old/7": "http://shop/item/7"}) == {}  # known alias
    assert collection.count_documents({}) == 3


def test_validators_are_given_only_for_records_of_the_current_config_version(handler) -> None:
    source = shop("life_versions")
    http = {"etag": '"a"', "bytes": 10}
    handler.write(source, [{"url": "u1", "price": 1, "_http": http}], "run-1", config_version="v1")
    handler.write(source, [{"url": "u2", "price": 2, "_http": http}], "run-1", config_version="v2")
    handler.write(source, [{"url": "u3", "price": 3, "_http": http}], "run-1")  # before versions were kept
    assert set(handler.validators(source, ["u1", "u2", "u3"], "v2")) == {"u2"}
    assert set(handler.validators(source, ["u1", "u2", "u3"])) == {"u1", "u2", "u3"}
    collection = handler.collection(source)
    assert collection.find_one({"url": "u1"})["config_version"] == "v1"
    changed = handler.write(source, [{"url": "u1", "price": 1, "_http": http}], "run-2", config_version="v2")
    assert changed.unchanged == 1  # a new version alone is not a change of the item's values
    assert collection.find_one({"url": "u1"})["config_version"] == "v2"
