"""The data handler: one bulk_write of upserts per batch, keyed by the source's key fields."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from harvester.storage.data_handler import KEY_INDEX_NAME, URL_INDEX_NAME, DataHandler

from tests.fixtures.demo_site import demo_source

pytestmark = pytest.mark.integration


@pytest.fixture
def handler(harvester_settings, mongo_server) -> DataHandler:
    return DataHandler(harvester_settings, mongo_server.client())


def test_upserts_keep_first_seen_and_update_data(handler, harvester_settings) -> None:
    source = demo_source("http://site", output={"key": ["url"]})
    first = datetime(2026, 1, 1, tzinfo=UTC)
    result = handler.write(source, [{"url": f"u{i}", "price": i} for i in range(100)], "run-1", now=first)
    assert (result.upserted, result.matched, result.stored) == (100, 0, 100)
    later = first + timedelta(days=1)
    again = handler.write(source, [{"url": f"u{i}", "price": i + 1} for i in range(100)], "run-2", now=later)
    assert (again.upserted, again.matched, again.modified) == (0, 100, 100)
    collection = handler.collection(source)
    document = collection.find_one({"url": "u7"})
    assert document["price"] == 8 and document["run_id"] == "run-2"
    assert document["first_seen_at"].replace(tzinfo=UTC) == first
    assert document["harvested_at"].replace(tzinfo=UTC) == later
    assert collection.count_documents({}) == 100
    assert {index["name"] for index in collection.list_indexes()} == {"_id_", KEY_INDEX_NAME}


def test_compound_key_unique_index_and_unkeyable_records(handler) -> None:
    source = demo_source("http://site", output={"key": ["sku", "country"], "collection": "by_sku"},
                         attributes={"sku": {"css": ".sku"}, "country": {"css": ".country"}})
    records = [{"url": "a", "sku": "S1", "country": "SG"}, {"url": "b", "sku": "S1", "country": "MY"},
               {"url": "c", "sku": "S1", "country": "SG"}, {"url": "d", "sku": None, "country": "SG"}]
    result = handler.write(source, records)
    assert result.upserted == 2 and result.rejected == {3: "output key field(s) missing: sku"}
    collection = handler.collection(source)
    assert collection.find_one({"sku": "S1", "country": "SG"})["url"] == "c"  # the last of a key wins
    indexes = {index["name"]: index for index in collection.list_indexes()}
    assert indexes[KEY_INDEX_NAME]["unique"] and list(indexes[KEY_INDEX_NAME]["key"]) == ["sku", "country"]
    assert list(indexes[URL_INDEX_NAME]["key"]) == ["url"]  # for the duplicate-URL checker's authority


def test_discard_sink_counts_and_writes_nothing(harvester_settings, mongo_server) -> None:
    handler = DataHandler(harvester_settings.model_copy(update={"output_sink": "discard"}), mongo_server.client())
    source = demo_source("http://site")
    result = handler.write(source, [{"url": "a"}, {"url": "b"}])
    assert result.discarded == 2 and result.stored == 2
    client = mongo_server.client()
    assert source.output_collection not in client[harvester_settings.mongo_database].list_collection_names()


def test_output_database_and_collection_from_the_source(handler, mongo_server, mongo_database) -> None:
    source = demo_source("http://site", output={"key": ["url"], "database": f"{mongo_database}_out",
                                                "collection": "things"})
    handler.write(source, [{"url": "x"}])
    client = mongo_server.client()
    try:
        assert client[f"{mongo_database}_out"]["things"].count_documents({}) == 1
    finally:
        client.drop_database(f"{mongo_database}_out")


def test_a_record_mongodb_refuses_never_fails_its_batch_mates(handler) -> None:
    """Once, one value above 2**63 failed the whole batch's write ("storage failed") for every record."""
    source = demo_source("http://site", output={"key": ["url"], "collection": "refused"})
    records = [{"url": f"u{i}", "price": i} for i in range(6)]
    records[1]["price"] = 2**64  # pymongo refuses it before sending: more than 8 bytes
    records[3]["price"] = "x" * (16 * 1024 * 1024 + 10)  # the server refuses it: over 16 MB
    records[4]["meta"] = {"a\x00b": 1}  # pymongo refuses it: a NUL in a key
    result = handler.write(source, records, "run-1")
    assert sorted(result.rejected) == [1, 3, 4]
    assert all("MongoDB" in reason or "cannot be stored" in reason for reason in result.rejected.values())
    assert result.upserted == 3 and result.stored == 3
    collection = handler.collection(source)
    assert sorted(document["url"] for document in collection.find({}, {"url": 1})) == ["u0", "u2", "u5"]


def test_a_rejected_key_rejects_every_record_of_that_key(handler) -> None:
    source = demo_source("http://site", output={"key": ["url"], "collection": "refused_key"})
    records = [{"url": "same", "n": 1}, {"url": "other", "n": 2}, {"url": "same", "n": 2**70}]
    result = handler.write(source, records)
    assert sorted(result.rejected) == [0, 2] and result.upserted == 1


def test_a_record_with_every_attribute_empty_never_overwrites_a_stored_one(handler) -> None:
    """A page that gave nothing but its key (a challenge page answering 200, an empty render) must not null the
    values a good page stored; a record nobody stored yet is still written, and so is one with a value."""
    source = demo_source("http://site", output={"key": ["url"]},
                         attributes={"title": {"css": "h1"}, "price": {"css": ".price", "type": "float"},
                                     "tags": {"css": "li.tag", "type": "list[str]"}})
    handler.write(source, [{"url": "kept", "title": "Lamp", "price": 9.5, "tags": ["a"]},
                           {"url": "changed", "title": "Desk", "price": 20.0, "tags": []}], "run-1")
    empty = {"title": None, "price": None, "tags": []}
    result = handler.write(source, [{"url": "kept", **empty}, {"url": "new", **empty},
                                    {"url": "changed", "title": None, "price": 19.0, "tags": []}], "run-2")
    collection = handler.collection(source)
    kept = collection.find_one({"url": "kept"})
    assert (kept["title"], kept["price"], kept["tags"], kept["run_id"]) == ("Lamp", 9.5, ["a"], "run-1")
    assert collection.find_one({"url": "new"})["title"] is None  # nothing stored to keep: written
    changed = collection.find_one({"url": "changed"})
    assert (changed["title"], changed["price"]) == (None, 19.0)  # one value found: the record is the page's
    assert result.rejected == {} and result.empty_kept == 1
