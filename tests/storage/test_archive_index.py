"""The archive index's lookups before each write (which payloads, which 304's URLs are archived already) are answered
from an index, never by reading the whole collection: the deduplication query runs once per archived batch, and a
scan grows with everything ever archived."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pymongo
import pytest
from harvester.storage import ArchiveIndex
from harvester.storage.archive_index import IndexEntry

from tests.fixtures.servers import MongoServer

pytestmark = pytest.mark.integration
MOMENT = datetime(2026, 12, 6, 3, 0, tzinfo=UTC)


def entry(number: int, source: str = "shop", record: str = "response") -> IndexEntry:
    return IndexEntry(source=source, run="run-1", task_id=f"t{number}", url=f"http://shop.test/p/{number}",
                      final_url=f"http://shop.test/p/{number}", time=MOMENT, file="file:///a.warc.gz",
                      offset=number * 100, length=100, digest=f"sha1:{number:032d}", status=200, record=record)


def stages(plan: dict[str, Any]) -> list[str]:
    """The winning plan's stages, outermost first (``SORT``, ``FETCH``, ``IXSCAN`` or ``COLLSCAN``)."""
    found, stage = [], plan["queryPlanner"]["winningPlan"]
    while stage:
        found.append(stage.get("stage", ""))
        stage = stage.get("inputStage")
    return found


def test_the_revisit_lookups_are_answered_from_an_index(mongo_server: MongoServer, mongo_database: str) -> None:
    client = pymongo.MongoClient(mongo_server.uri, serverSelectionTimeoutMS=10_000)
    try:
        index = ArchiveIndex(client[mongo_database])
        index.collection.create_index([("source", 1), ("digest", 1)], name="source_digest")  # an earlier version's
        index.add([entry(number, source=("shop", "other")[number % 2]) for number in range(40)])
        index.add([entry(40, record="revisit")])
        digest_query, url_query = index.original_queries("shop", [f"sha1:{n:032d}" for n in (2, 4, 40)],
                                                         ["http://shop.test/p/6"])
        assert "COLLSCAN" not in stages(index.collection.find(digest_query).explain())
        assert "COLLSCAN" not in stages(index.collection.find(url_query).explain())
        assert "source_digest" not in index.collection.index_information()  # superseded: dropped
        found = index.originals("shop", [("http://shop.test/p/2", f"sha1:{2:032d}", False),
                                         ("http://shop.test/p/40", f"sha1:{40:032d}", False),
                                         ("http://shop.test/p/6", "sha1:changed", True),
                                         ("http://shop.test/p/3", f"sha1:{3:032d}", False)])
        # a revisit row is no original; another source's payload is not this source's
        assert sorted(found) == [0, 2] and found[2].payload.offset == 600
    finally:
        client.close()


def test_the_superseded_index_dropped_by_another_process_first_is_no_failure(mongo_server: MongoServer,
                                                                             mongo_database: str) -> None:
    """Worker processes of a new version each drop ``source_digest`` once: the one that finds it gone already
    (dropped by another between its look and its drop) archives its batch all the same."""
    client = pymongo.MongoClient(mongo_server.uri, serverSelectionTimeoutMS=10_000)
    try:
        first, second = ArchiveIndex(client[mongo_database]), ArchiveIndex(client[mongo_database])
        first.collection.create_index([("source", 1), ("digest", 1)], name="source_digest")
        looked = second.collection.index_information()
        first.add([entry(1)])  # drops it
        second.collection.index_information = lambda: looked  # type: ignore[method-assign]  # saw it before the drop
        second.add([entry(2)])
        assert second.collection.count_documents({}) == 2
    finally:
        client.close()


def test_earlier_of_gives_each_urls_row_before_a_moment(mongo_server: MongoServer, mongo_database: str) -> None:
    """What a re-extraction reads past a response that was not the page (a challenge, a 5xx): the URL's row
    archived just before it, in one query; a URL with nothing before is left out."""
    from dataclasses import replace
    from datetime import timedelta

    client = pymongo.MongoClient(mongo_server.uri, serverSelectionTimeoutMS=10_000)
    try:
        index = ArchiveIndex(client[mongo_database])
        first, second = entry(1), entry(2)
        index.add([replace(first, time=MOMENT + timedelta(minutes=minute), task_id=f"t1-{minute}",
                           offset=minute) for minute in (0, 5, 9)] + [second, replace(entry(1, source="other"),
                                                                                        time=MOMENT)])
        found = index.earlier_of("shop", {first.url: MOMENT + timedelta(minutes=9), second.url: MOMENT,
                                          "http://shop.test/never": MOMENT})
        assert set(found) == {first.url} and found[first.url]["offset"] == 5
        naive = index.earlier_of("shop", {first.url: (MOMENT + timedelta(minutes=5)).replace(tzinfo=None)})
        assert naive[first.url]["offset"] == 0 and index.earlier_of("shop", {}) == {}
    finally:
        client.close()
