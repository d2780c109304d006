"""The archive's payload filter (a Bloom filter in Redis, one per source): a payload it has never seen is archived
as a response without asking the index, one it may have seen is looked up as before; a filter that is missing is
built from the index, in the background, while every page is looked up; every worker shares it; Redis failing costs
the lookups, never the archive; the clean-up drops it."""

from __future__ import annotations

import hashlib
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
import redis
from harvester.config import SourceConfig
from harvester.redis_keys import SourceKeys
from harvester.scraping import Exchange
from harvester.storage import ArchivedDigests, ArchivedPage, ArchiveIndex, ArchiveWriter
from harvester.storage.archive_digests import HASHES, raw_sha1
from harvester.storage.archive_index import IndexEntry
from harvester.storage.warc_records import payload_digest
from warcio.archiveiterator import ArchiveIterator

from tests.fixtures.servers import free_port

pytestmark = pytest.mark.integration
MOMENT = datetime(2026, 12, 6, 20, 0, tzinfo=UTC)
BITS = 1 << 16


def sha1(body: bytes) -> bytes:
    return hashlib.sha1(body).digest()


def response_row(body: bytes, url: str = "http://shop.example/old") -> IndexEntry:
    return IndexEntry(source="shop", run="earlier", task_id="t", url=url, final_url=url, time=MOMENT,
                      file="file:///nowhere.warc.gz", offset=0, length=10, digest=payload_digest(body), status=200,
                      record="response")


def built(filters: ArchivedDigests, source: str = "shop", seconds: float = 10.0) -> None:
    """Wait for the background build of ``source``'s filter (its bit 0)."""
    deadline = time.monotonic() + seconds
    while not filters.client.getbit(SourceKeys(source).archived_digests, 0):
        assert time.monotonic() < deadline, "the filter was not built"
        time.sleep(0.05)


@pytest.fixture
def index(mongo_server, mongo_database) -> ArchiveIndex:
    return ArchiveIndex(mongo_server.client()[mongo_database])


def test_a_missing_filter_answers_nothing_and_is_built_from_the_index(redis_client, index) -> None:
    index.add([response_row(b"old"), response_row(b"other", "http://shop.example/other")])
    filters = ArchivedDigests(redis_client, index, BITS)
    assert filters.screen("shop", [sha1(b"new")]) is None  # not built: every page is looked up meanwhile
    built(filters)
    assert filters.screen("shop", [sha1(b"old"), sha1(b"other"), sha1(b"never")]) == [True, True, False]
    assert filters.screen("shop", [sha1(b"new"), sha1(b"never")]) == [True, True]  # each screening marks
    assert filters.screen("another", [sha1(b"old")]) is None  # one filter a source


def test_the_filter_is_shared_by_every_worker_and_screening_is_one_step(redis_server, redis_client, index) -> None:
    first = ArchivedDigests(redis_client, index, BITS)
    second = ArchivedDigests(redis_server.client(), index, BITS)
    assert first.build("shop") and second.build("shop")  # an empty index: built at once
    assert first.screen("shop", [sha1(b"page")]) == [False]
    assert second.screen("shop", [sha1(b"page")]) == [True]
    # two copies of one payload in one batch: the second finds the first's bits (then the lookup decides)
    assert second.screen("shop", [sha1(b"twin"), sha1(b"twin")]) == [False, True]
    set_bits = redis_client.bitcount(SourceKeys("shop").archived_digests)
    assert 1 + 2 <= set_bits <= 1 + 2 * HASHES  # the built bit and each payload's bits


def test_one_process_builds_at_a_time(redis_client, index) -> None:
    filters = ArchivedDigests(redis_client, index, BITS)
    redis_client.set(SourceKeys("shop").archived_digests_build, "another process", ex=60)
    assert filters.build("shop") is False
    assert not redis_client.getbit(SourceKeys("shop").archived_digests, 0)
    redis_client.delete(SourceKeys("shop").archived_digests_build)
    assert filters.build("shop") is True and redis_client.getbit(SourceKeys("shop").archived_digests, 0)
    assert not redis_client.exists(SourceKeys("shop").archived_digests_build)  # the lock goes with the build


def test_no_bits_means_every_page_is_looked_up(redis_client, index) -> None:
    filters = ArchivedDigests(redis_client, index, 0)
    assert filters.screen("shop", [sha1(b"page")]) is None
    assert redis_client.keys("*") == []


def test_redis_failing_costs_the_lookups_not_the_answer(index) -> None:
    dead = redis.Redis(port=free_port(), socket_connect_timeout=0.5, socket_timeout=0.5)
    assert ArchivedDigests(dead, index, BITS).screen("shop", [sha1(b"page")]) is None


def test_forget_drops_the_filter_and_the_next_batch_builds_it_again(redis_client, index) -> None:
    filters = ArchivedDigests(redis_client, index, BITS)
    filters.build("shop")
    filters.screen("shop", [sha1(b"expired")])
    filters.forget("shop")
    assert filters.screen("shop", [sha1(b"expired")]) is None
    built(filters)
    assert filters.screen("shop", [sha1(b"expired")]) == [True]  # marked by the screening above, while unbuilt


def test_raw_sha1_reads_what_the_index_holds() -> None:
    assert raw_sha1(payload_digest(b"x")) == sha1(b"x")
    assert raw_sha1("md5:abc") is None and raw_sha1("sha1:short") is None and raw_sha1("sha1:" + "1" * 32) is None


def source(location: Path) -> SourceConfig:
    return SourceConfig.model_validate({"name": "shop", "input": {"seeds": ["http://shop.example/"]},
                                        "attributes": {"title": {"css": "h1"}},
                                        "output": {"archive": {"enabled": True, "location": f"file://{location}"}}})


def pages(*bodies: bytes) -> list[ArchivedPage]:
    return [ArchivedPage(f"t{number}", "run", f"http://shop.example/{number}", Exchange(
        "GET", f"http://shop.example/{number}", (("User-Agent", "Harvester"),), 200, (("Content-Type", "text/html"),),
        body), MOMENT) for number, body in enumerate(bodies)]


def test_a_writer_asks_the_index_only_for_payloads_the_filter_may_have_seen(redis_client, index, tmp_path,
                                                                             monkeypatch) -> None:
    filters = ArchivedDigests(redis_client, index, BITS)
    writer = ArchiveWriter(index, "file:///unused", 30.0, 0.0, filters)
    asked: list[list[str]] = []
    real_originals = writer.rows.originals

    def originals(source_name, lookups):  # the real lookup, its digests noted
        asked.append([digest for _, digest, _ in lookups])
        return real_originals(source_name, lookups)

    monkeypatch.setattr(writer.rows, "originals", originals)
    try:
        writer.archive(source(tmp_path), pages(b"<p>one</p>", b"<p>two</p>"))
        assert asked == [[payload_digest(b"<p>one</p>"), payload_digest(b"<p>two</p>")]]  # unbuilt: all asked
        built(filters)
        writer.archive(source(tmp_path), pages(b"<p>three</p>", b"<p>one</p>", b"<p>four</p>"))
        assert asked[1:] == [[payload_digest(b"<p>one</p>")]]  # the new payloads were not looked up
    finally:
        writer.close()
    kinds = []
    for path in sorted(tmp_path.rglob("*.warc.gz")):
        with path.open("rb") as handle:
            kinds += [(record.rec_type, record.rec_headers.get_header("WARC-Payload-Digest"))
                      for record in ArchiveIterator(handle) if record.rec_type in ("response", "revisit")]
    assert kinds == [("response", payload_digest(b"<p>one</p>")), ("response", payload_digest(b"<p>two</p>")),
                     ("response", payload_digest(b"<p>three</p>")), ("revisit", payload_digest(b"<p>one</p>")),
                     ("response", payload_digest(b"<p>four</p>"))]


def test_a_writer_whose_redis_fails_still_writes_revisits(index, tmp_path) -> None:
    dead = redis.Redis(port=free_port(), socket_connect_timeout=0.5, socket_timeout=0.5)
    writer = ArchiveWriter(index, "file:///unused", 30.0, 0.0, ArchivedDigests(dead, index, BITS))
    try:
        writer.archive(source(tmp_path), pages(b"<p>same</p>"))
        writer.archive(source(tmp_path), pages(b"<p>same</p>"))
    finally:
        writer.close()
    assert [row["record"] for row in index.latest("shop")] == ["revisit"]  # the latest row of the one URL


def test_a_build_that_outlived_its_lock_leaves_the_next_builders_lock(redis_client, index) -> None:
    lock = SourceKeys("shop").archived_digests_build

    class OutlivedIndex(ArchiveIndex):
        def response_digests(self, source: str):
            redis_client.set(lock, "the next builder", ex=60)  # this build's lock expired, another process took it
            yield from super().response_digests(source)

    filters = ArchivedDigests(redis_client, OutlivedIndex(index.collection.database), BITS)
    assert filters.build("shop") is True and redis_client.getbit(SourceKeys("shop").archived_digests, 0)
    assert redis_client.get(lock) == b"the next builder"  # released only while it was this build's
