"""A worker process's copy of a source's payload filter: it answers as the filter in Redis does, reads what other
processes mark through the log within an interval, reloads the bitmap when the log no longer reaches its cursor or
the clean-up dropped the filter, answers on while Redis fails, and only sources archiving steadily get one."""

from __future__ import annotations

import hashlib
import subprocess
import time

import pytest
import redis
from harvester.redis_keys import SourceKeys
from harvester.storage import ArchivedDigests, ArchiveIndex
from harvester.storage.archive_digest_copies import COPY_AFTER_BATCHES, mark
from harvester.storage.archive_digests import HASHES

from tests.fixtures.servers import free_port

pytestmark = pytest.mark.integration
BITS = 1 << 16
INTERVAL = 0.3


def sha1(body: bytes) -> bytes:
    return hashlib.sha1(body).digest()


@pytest.fixture
def index(mongo_server, mongo_database) -> ArchiveIndex:
    return ArchiveIndex(mongo_server.client()[mongo_database])


def with_copy(client: redis.Redis, index: ArchiveIndex, source: str = "shop") -> ArchivedDigests:
    """A process whose filter of ``source`` became a copy: it archived batches steadily."""
    filters = ArchivedDigests(client, index, BITS, copy_interval=INTERVAL)
    for number in range(COPY_AFTER_BATCHES):
        assert filters.screen(source, [sha1(b"warm %d" % number)]) == [False]
    assert filters.copies.holds(source)
    return filters


def synced(filters: ArchivedDigests, source: str = "shop") -> None:
    """Past the interval, a batch of a payload nobody archives: the copy syncs."""
    time.sleep(INTERVAL + 0.05)
    assert filters.screen(source, [sha1(b"tick %f" % time.monotonic())]) == [False]


def test_the_copy_sets_the_bits_the_script_sets(redis_client, index) -> None:
    filters = ArchivedDigests(redis_client, index, BITS)
    payloads = [sha1(b"%d" % number) for number in range(50)]
    filters.screen("shop", payloads)  # the script marks them (unbuilt: no answer)
    bitmap = bytearray(BITS // 8 + 1)
    assert mark(bitmap, [*payloads, payloads[0]], BITS, HASHES)[-1] is True
    in_redis = redis_client.get(SourceKeys("shop").archived_digests)
    assert bytes(bitmap[:len(in_redis)]) == in_redis and not any(bitmap[len(in_redis):])


def test_a_copy_answers_as_redis_and_both_meet_within_an_interval(redis_server, redis_client, index) -> None:
    asking = ArchivedDigests(redis_client, index, BITS)  # a process without a copy: a call a batch
    assert asking.build("shop")
    assert asking.screen("shop", [sha1(b"before")]) == [False]
    copying = with_copy(redis_server.client(), index)
    loaded = copying.copies._copies["shop"].loaded_at
    assert copying.screen("shop", [sha1(b"before"), sha1(b"mine")]) == [True, False]  # Redis's bits, here
    assert asking.screen("shop", [sha1(b"theirs")]) == [False]  # marked in Redis and its log
    assert asking.screen("shop", [sha1(b"mine")]) == [False]  # not synced yet: the documented window
    synced(copying)
    assert copying.screen("shop", [sha1(b"theirs")]) == [True]  # read from the log...
    assert copying.copies._copies["shop"].loaded_at == loaded
    assert asking.screen("shop", [sha1(b"mine2")]) == [False] and asking.screen("shop", [sha1(b"mine")]) == [True]


def test_a_copy_reloads_when_the_clean_up_dropped_the_filter_and_sees_it_built_again(
        redis_server, redis_client, index) -> None:
    other = ArchivedDigests(redis_client, index, BITS)
    assert other.build("shop")
    copying = with_copy(redis_server.client(), index)
    other.forget("shop")  # the clean-up: bitmap and log gone
    assert not redis_client.exists(SourceKeys("shop").archived_digests_log)
    time.sleep(INTERVAL + 0.05)
    assert copying.screen("shop", [sha1(b"warm 0")]) is None  # reloaded: not built, every page is looked up
    deadline = time.monotonic() + 10  # its batches started the build (an empty index: at once)
    while copying.screen("shop", [sha1(b"after")]) is None:
        assert time.monotonic() < deadline, "the copy never saw the filter built again"
        time.sleep(0.05)
    assert copying.screen("shop", [sha1(b"warm 3"), sha1(b"after")]) == [False, True]  # the old bits are gone


def test_a_copy_whose_log_was_trimmed_past_its_cursor_reloads_the_bitmap(redis_server, redis_client, index) -> None:
    other = ArchivedDigests(redis_client, index, BITS)
    assert other.build("shop")
    copying = with_copy(redis_server.client(), index)
    assert other.screen("shop", [sha1(b"missed")]) == [False]
    log = SourceKeys("shop").archived_digests_log
    redis_client.xtrim(log, maxlen=0)  # as the age trim does for a copy that did not sync for a while
    loaded = copying.copies._copies["shop"].loaded_at
    synced(copying)
    assert copying.copies._copies["shop"].loaded_at > loaded
    assert copying.screen("shop", [sha1(b"missed")]) == [True]  # from the bitmap


def start_redis(command: list[str]) -> subprocess.Popen:
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    client, deadline = redis.Redis(port=int(command[command.index("--port") + 1])), time.monotonic() + 10
    while True:
        try:
            client.ping()
            return server
        except redis.ConnectionError:
            assert time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.05)


def test_a_copy_answers_on_while_redis_fails_and_sends_its_digests_when_it_is_back(index, tmp_path) -> None:
    port = free_port()
    command = ["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--dir", str(tmp_path)]
    server = start_redis(command)
    try:
        client = redis.Redis(port=port, socket_timeout=2)
        assert ArchivedDigests(client, index, BITS).build("shop")
        copying = with_copy(client, index)
        server.terminate()
        server.wait(10)
        time.sleep(INTERVAL + 0.05)
        assert copying.screen("shop", [sha1(b"offline"), sha1(b"warm 1")]) == [False, True]  # the copy answers
        server = start_redis(command)  # back, empty: the filter and its log are lost
        time.sleep(INTERVAL + 0.05)
        assert copying.screen("shop", [sha1(b"back")]) is None  # synced: not built, every page looked up
        deadline = time.monotonic() + 10  # its batches started the build (an empty index: at once)
        while copying.screen("shop", [sha1(b"later")]) is None:
            assert time.monotonic() < deadline, "the copy never saw the filter built again"
            time.sleep(0.05)
        asking = ArchivedDigests(client, index, BITS)  # the digests marked while Redis was down reached it
        assert asking.screen("shop", [sha1(b"offline"), sha1(b"back"), sha1(b"nobody")]) == [True, True, False]
    finally:
        server.terminate()
        server.wait(10)


def test_sources_that_archive_now_and_then_ask_redis_each_batch(redis_client, index) -> None:
    filters = ArchivedDigests(redis_client, index, BITS, copy_interval=INTERVAL)
    assert filters.build("shop")
    for number in range(COPY_AFTER_BATCHES - 1):
        filters.screen("shop", [sha1(b"%d" % number)])
    assert not filters.copies.holds("shop")
    no_copies = ArchivedDigests(redis_client, index, BITS, copy_interval=0)  # archive_index_flush_seconds 0
    for number in range(2 * COPY_AFTER_BATCHES):
        no_copies.screen("shop", [sha1(b"x%d" % number)])
    assert not no_copies.copies.holds("shop")
