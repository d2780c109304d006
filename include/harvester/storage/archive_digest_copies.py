"""A worker process's copies of the payload filters of the sources it archives most: the filter answered here,
brought up to date with Redis once an interval instead of a call a batch.

The filter (:mod:`harvester.storage.archive_digests`) is one bitmap per source in Redis, shared by every worker.
Asking it costs a Redis round trip a batch, about 0.015 ms of a worker's CPU a page (2026-12-06): the largest
part of the archive's cost left. A copy answers in the process: each batch's digests are marked in the copy
and remembered; once every ``interval`` (``archive_index_flush_seconds``: the rows of a batch reach the index no
sooner anyway) one script call (``lua/archived_digests_sync.lua``) marks them in Redis, appends them to the
source's log (a stream, trimmed by age), and brings back what other processes marked since the copy's cursor,
or the whole bitmap when the log no longer reaches back to it (or every :data:`RELOAD_SECONDS`, which also drops
the bits of payloads the clean-up deleted).

What a copy promises is the filter's, but an interval late for other processes: a payload another worker archived
less than two intervals ago may be called new here, and is then archived once more as a response: bytes, never a
record, and the same window the index's rows already have (a lookup cannot find another worker's rows before they
are flushed). A copy's bits are a superset of what it read, so it never calls archived a payload nobody archived
(that would cost a lookup, never a record either).

A copy costs ``bits / 8`` bytes (1 MiB at the default) and a load of the bitmap now and then, so only sources
that archive steadily in this process get one (:data:`COPY_AFTER_BATCHES` batches within :data:`COPY_WINDOW_SECONDS`),
at most :data:`COPIES_KEPT` of them; the others ask Redis each batch, as without copies.

Why our own: no Python Bloom filter library keeps a replica of a Redis bitmap (RedisBloom has no client-side
cache either); the protocol is the few lines of a log read from a cursor.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from harvester.errors import StorageError, redis_storage_errors
from harvester.redis_scripts import Scripts
from harvester.storage.scripts import ARCHIVED_DIGESTS_SYNC

log = logging.getLogger(__name__)

COPIES_KEPT = 8  # sources a process keeps a copy of (1 MiB each at the default size)
COPY_AFTER_BATCHES = 8  # a source gets a copy once it archived this many batches here...
COPY_WINDOW_SECONDS = 60.0  # ...within this long
RELOAD_SECONDS = 600.0  # a copy reloads the whole bitmap this often (bits of payloads the clean-up deleted go)
LOG_KEEP_SECONDS = 120  # how long the log keeps entries: a copy not synced for longer reloads the bitmap
PENDING_KEPT = 100_000  # digests a copy keeps for Redis while Redis fails (past it, the oldest are dropped: bytes)


@dataclass
class FilterCopy:
    """One source's filter as this process holds it: the bitmap, the log's entry it is current to, and the
    digests marked here since the last sync."""

    bitmap: bytearray
    cursor: str
    built: bool
    loaded_at: float
    synced_at: float
    pending: deque[bytes] = field(default_factory=lambda: deque(maxlen=PENDING_KEPT))


def mark(bitmap: bytearray, raw_digests: Sequence[bytes], bits: int, hashes: int) -> list[bool]:
    """Set each digest's bits in ``bitmap`` (Redis's bit order: bit 0 is the first byte's highest); for each,
    whether all were set already. The positions are ``archived_digests.lua``'s."""
    span = bits - 1
    seen = []
    for raw in raw_digests:
        first, step = int.from_bytes(raw[:4], "big"), int.from_bytes(raw[4:8], "big") | 1
        all_set = True
        for number in range(hashes):
            position = 1 + (first + number * step) % span
            index, mask = position >> 3, 0x80 >> (position & 7)
            if not bitmap[index] & mask:
                all_set = False
                bitmap[index] |= mask
        seen.append(all_set)
    return seen


class FilterCopies:
    """This process's copies, by source (the writer's thread uses them; ``interval`` 0: no copies)."""

    def __init__(self, scripts: Scripts, bits: int, hashes: int, interval: float) -> None:
        self.scripts = scripts  # with ARCHIVED_DIGESTS_SYNC, on a connection of its own
        self.bits = bits
        self.hashes = hashes
        self.interval = interval
        self._copies: OrderedDict[str, FilterCopy] = OrderedDict()  # least recently used first
        self._recent: dict[str, deque[float]] = {}  # a source's latest batches without a copy (monotonic)

    def holds(self, source: str) -> bool:
        return source in self._copies

    def screen(self, source: str, raw_digests: Sequence[bytes]) -> list[bool] | None:
        """The filter's answer from this process's copy of ``source``'s (:meth:`holds`), the digests marked in it and
        synced when due; None while the filter is not built (every page is looked up; the copy syncs each batch
        then, so it sees the build end at once)."""
        copy = self._copies[source]
        self._copies.move_to_end(source)
        seen = mark(copy.bitmap, raw_digests, self.bits, self.hashes)
        copy.pending.extend(raw_digests)
        now = time.monotonic()
        if not copy.built or now - copy.synced_at >= self.interval:
            self.sync(source, copy, reload=now - copy.loaded_at >= RELOAD_SECONDS)
        return seen if copy.built else None

    def asked(self, source: str, built: bool) -> None:
        """A batch of ``source`` asked Redis (no copy): its copy is loaded once the source archives steadily here
        and its filter is built."""
        if self.interval <= 0 or not built:
            return
        recent = self._recent.setdefault(source, deque(maxlen=COPY_AFTER_BATCHES))
        now = time.monotonic()
        recent.append(now)
        if len(recent) < COPY_AFTER_BATCHES or now - recent[0] > COPY_WINDOW_SECONDS:
            return
        del self._recent[source]
        copy = FilterCopy(bytearray(self.bits // 8 + 1), "", False, now, now)
        if self.sync(source, copy, reload=True):
            self._copies[source] = copy
            while len(self._copies) > COPIES_KEPT:
                evicted, oldest = self._copies.popitem(last=False)
                self.sync(evicted, oldest, reload=False)  # its digests marked here reach Redis first

    def sync(self, source: str, copy: FilterCopy, reload: bool) -> bool:
        """Send the copy's pending digests, take what it lacks (the log since its cursor, or the bitmap); False when
        Redis failed (the copy answers on, its digests kept for the next sync)."""
        pending = list(copy.pending)
        try:
            with redis_storage_errors():
                reply = self.scripts.call_alone(
                    ARCHIVED_DIGESTS_SYNC.name, source, bits=self.bits, hashes=self.hashes,
                    digests=b"".join(pending).hex(), cursor="" if reload else copy.cursor,
                    keep_seconds=LOG_KEEP_SECONDS)
        except StorageError as error:
            log.warning("archive: the payload filter of %s could not be synchronised (%s): its copy answers on",
                        source, error)
            copy.synced_at = time.monotonic()
            return False
        for _ in pending:
            copy.pending.popleft()
        if reply.built and not copy.built and reply.kind == "log":  # built since: its bits came from the index,
            return self.sync(source, copy, reload=True)  # not through the log
        self._take(copy, reply)
        return True

    def _take(self, copy: FilterCopy, reply: Any) -> None:
        now = time.monotonic()
        copy.cursor, copy.built, copy.synced_at = reply.cursor, reply.built, now
        if reply.kind == "bitmap":  # (it holds the digests this sync sent: marked before it was read)
            copy.bitmap[:] = bytes(len(copy.bitmap))
            copy.bitmap[:len(reply.data)] = reply.data
            copy.loaded_at = now
        else:
            data = reply.data
            mark(copy.bitmap, [bytes.fromhex(data[start:start + 40].decode()) for start in range(0, len(data), 40)],
                 self.bits, self.hashes)

    def forget(self, source: str) -> None:
        self._copies.pop(source, None)
        self._recent.pop(source, None)

    def close(self) -> None:
        """Every copy's pending digests into Redis (a worker that ends)."""
        for source, copy in list(self._copies.items()):
            if copy.pending:
                self.sync(source, copy, reload=False)
        self._copies.clear()
