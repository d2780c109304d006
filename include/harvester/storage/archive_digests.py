"""Which payloads a source may have archived already: a Bloom filter in Redis, so that most archived pages skip
the index's revisit lookup.

An archived page is written as a revisit when the source already archived the same payload, which the index
answers (:meth:`ArchiveIndex.originals`, a MongoDB round trip per batch). Most payloads are new (a page changed,
or was never fetched), and the lookup cost about a quarter of the archive's CPU for them (0.037 ms of 0.14 a page,
measured 2026-12-06). A Bloom filter of the source's archived payload digests answers "certainly new" for them
without asking; a payload it may have seen is looked up as before.

Why our own filter: the filter must be one for every worker process (a payload archived by one is a revisit for
all), so it lives in Redis, where Harvester's shared state is. RedisBloom's ``BF.*`` commands are a module that
Debian's redis-server and most managed Redis lack; the Python filters on PyPI (pybloom-live, rbloom) live in one
process. A bitmap and a Lua script (``lua/archived_digests.lua``) need neither: one call per batch reads and sets
every bit of its digests atomically, so of two processes archiving the same payload at once the second finds it
maybe archived (and looks it up as today). The positions are computed in the script from the digests' hex (one
argument): ``BITFIELD`` with each bit as three arguments cost the writer 0.5 ms a batch in redis-py's packing,
the script 0.13 ms (measured 2026-12-06), against about 0.6 ms for the index's lookup.

What it promises, and why each case is safe:

- A digest the filter calls new was never screened since the filter was built, so no row of it exists unless
  it was archived before the build began and its row was still waiting in a worker's journal while the build
  read the index (``archive_index_flush_seconds``, 2 s): that payload is then written once more as a response,
  which costs bytes, never a record.
- A digest it may have seen is looked up as before; a false positive (about 1 in 2,000 at 500,000 digests in the
  default 1 MiB) costs one lookup. Rows the clean-up deleted leave their bits: :meth:`forget` drops the filter
  after a clean-up, and the next batch builds it again from the rows left.
- Bit 0 says the filter holds the whole index: a filter that is missing (new, lost with Redis, dropped by the
  clean-up, or made before this version) is built from the index in the background (one process at a time, by a
  Redis lock), and every page is looked up meanwhile. Bits are set by every screening, built or not.
- Redis failing costs the lookups, never the archive.
"""

from __future__ import annotations

import base64
import logging
import threading
from collections.abc import Sequence
from typing import Any

import redis

from harvester.errors import StorageError, redis_storage_errors
from harvester.redis_keys import SourceKeys
from harvester.redis_scripts import Scripts
from harvester.settings import HarvesterSettings
from harvester.storage.archive_index import ArchiveIndex
from harvester.storage.scripts import ARCHIVED_DIGESTS

log = logging.getLogger(__name__)

HASHES = 7  # bits per digest: at the default size, 1 false positive in 2,000 at 500,000 digests
BUILD_LOCK_SECONDS = 600  # one builder per source at a time; a builder that died frees the lock past this
BUILD_DIGESTS_PER_CALL = 1000  # 40 KB of hex and 7,000 bits a script call while building


def raw_sha1(digest: str) -> bytes | None:
    """The 20 bytes of an index row's ``sha1:<base32>`` digest; None for another algorithm or a damaged one."""
    algorithm, _, value = digest.partition(":")
    if algorithm.lower() != "sha1" or len(value) != 32:
        return None
    try:
        return base64.b32decode(value)
    except ValueError:
        return None


class ArchivedDigests:
    """The filter of each source's archived payload digests, ``bits`` bits a source (0: no filter, every page is
    looked up). ``index`` is what a missing filter is built from: its ``response_digests(source)``."""

    def __init__(self, client: redis.Redis, index: ArchiveIndex, bits: int) -> None:
        self.client = client
        self.scripts = Scripts(client, [ARCHIVED_DIGESTS])  # the builds' calls (a thread of their own)
        self._screening = Scripts(client, [ARCHIVED_DIGESTS], own_connection=True)  # the batches' (once a batch)
        self.index = index
        self.bits = bits
        self._building: set[str] = set()  # sources this process is building the filter of
        self._lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: HarvesterSettings, index: ArchiveIndex) -> ArchivedDigests:
        from harvester.connections import REDIS_DEFAULT, redis_client

        return cls(redis_client(REDIS_DEFAULT, settings=settings), index, settings.archive_digest_filter_bits)

    def screen(self, source: str, raw_digests: Sequence[bytes]) -> list[bool] | None:
        """For each payload's SHA-1, whether the source may have archived it (then the index is asked), and each
        marked as archived, in one script call. None when the filter cannot tell (not built yet, no filter, or
        Redis failed): then every payload is looked up."""
        if self.bits <= 1 or not raw_digests:
            return None
        try:
            with redis_storage_errors():
                reply = self._mark(source, b"".join(raw_digests), built=False, scripts=self._screening)
        except StorageError as error:  # Redis failing: the lookups still answer
            log.warning("archive: the payload filter of %s did not answer (%s): every page is looked up", source,
                        error)
            return None
        if not reply.built:
            self._build_later(source)
            return None
        return [flag == "1" for flag in reply.seen]

    @redis_storage_errors()
    def forget(self, source: str) -> None:
        """Drop the source's filter (after the clean-up deleted rows): the next batch builds it from what is left.
        Raises :class:`StorageError` when Redis fails."""
        self.client.delete(SourceKeys(source).archived_digests)

    def build(self, source: str) -> bool:
        """Set the bits of every payload the index holds for ``source``, then the built bit; False when another
        process is building it (or there is no filter). Bits set by batches meanwhile stay (archived payloads too)."""
        if self.bits <= 1:
            return False
        # redis-py's lock: a token of its own, released only while it is still ours (a build that outlived the
        # lock's time must not free the next builder's)
        lock = self.client.lock(SourceKeys(source).archived_digests_build, timeout=BUILD_LOCK_SECONDS,
                                blocking=False)
        if not lock.acquire():
            return False
        try:
            chunk: list[bytes] = []
            for digest in self.index.response_digests(source):
                raw = raw_sha1(digest)
                if raw is not None:
                    chunk.append(raw)
                if len(chunk) >= BUILD_DIGESTS_PER_CALL:
                    self._mark(source, b"".join(chunk), built=False)
                    chunk = []
            self._mark(source, b"".join(chunk), built=True)
        finally:
            try:
                with redis_storage_errors():
                    lock.release()
            except StorageError as error:  # it expired, and perhaps another process holds it now: theirs stays
                log.warning("archive: the payload filter of %s outlived its build lock (%s)", source, error)
        return True

    def _mark(self, source: str, raw_digests: bytes, built: bool, scripts: Scripts | None = None) -> Any:
        return (scripts or self.scripts).call_alone(ARCHIVED_DIGESTS.name, source, bits=self.bits, hashes=HASHES,
                                                    digests=raw_digests.hex(), mark_built="1" if built else "0")

    def close(self) -> None:
        """Drop the screening's connection (the writer closes)."""
        self._screening.close()

    def _build_later(self, source: str) -> None:
        """Build the filter in a thread of its own (a large index takes seconds to read: never in a batch's time)."""
        with self._lock:
            if source in self._building:
                return
            self._building.add(source)
        threading.Thread(target=self._build_logged, args=(source,), name="harvester-archive-filter",
                         daemon=True).start()

    def _build_logged(self, source: str) -> None:
        try:
            if self.build(source):
                log.info("archive: the payload filter of %s is built from its index", source)
        except Exception as error:  # Redis or the index: the next batch that finds the filter unbuilt tries again
            log.warning("archive: building the payload filter of %s failed: %s", source, error)
        finally:
            with self._lock:
                self._building.discard(source)
